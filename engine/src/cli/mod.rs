//! The `tokenscale-engine` command line: one file per subcommand.

use clap::{Parser, Subcommand};

/// tokenscale-engine: one tokenscale serving replica.
#[derive(Debug, Parser)]
#[command(name = "tokenscale-engine", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {}
}
