//! `tokenscale`: up, bench, sim, usage. Parses the command line and hands it to the subcommand.

use clap::{Parser, Subcommand};

/// Serve, measure and simulate autoscaled LLM fleets.
#[derive(Debug, Parser)]
#[command(name = "tokenscale", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a trace against a simulated fleet under several autoscaling policies.
    Sim(tokenscale::sim::SimArgs),
    /// Measure an OpenAI-compatible server: throughput and latency percentiles per load level.
    Bench(tokenscale::bench::BenchArgs),
    /// Run gateway, engine replicas and the autoscaler on this machine from a ModelDeployment.
    Up(tokenscale::up::UpArgs),
    /// A gateway's usage per tenant and model: each limit's use and 429s, and which binds.
    Usage(tokenscale::usage::UsageArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim(args) => println!("{}", tokenscale::sim::run_command(&args)?),
        Command::Bench(args) => println!("{}", tokenscale::bench::run_command(&args)?),
        Command::Up(args) => tokenscale::up::run_command(&args)?,
        Command::Usage(args) => println!("{}", tokenscale::usage::run_command(&args)?),
    }
    Ok(())
}
