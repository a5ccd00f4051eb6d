//! The `tokenscale-engine` command line: one file per subcommand.

use clap::{Parser, Subcommand};

pub mod bench;
pub mod cuda_check;
pub mod generate;
pub mod pull;
pub mod quantize;
pub mod serve;

/// tokenscale-engine: one tokenscale serving replica.
#[derive(Debug, Parser)]
#[command(name = "tokenscale-engine", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure prefill and batched-decode throughput on the CPU backend.
    Bench(bench::BenchArgs),
    /// Compile the CUDA kernels (`--compile-only`), or check them and the model on a GPU.
    CudaCheck(cuda_check::CudaCheckArgs),
    /// Generate one completion of a prompt on the CPU backend.
    Generate(generate::GenerateArgs),
    /// Fetch a model (`hf://` source or the test alias) into the cache and print its path.
    Pull(pull::PullArgs),
    /// Requantise a GGUF model (llama.cpp's layouts and mixes, e.g. --type Q4_K_M).
    Quantize(quantize::QuantizeArgs),
    /// Serve the OpenAI-compatible API (continuous batching over a paged KV cache).
    // Boxed: its flags outweigh every other subcommand's (clippy's large_enum_variant).
    Serve(Box<serve::ServeArgs>),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::CudaCheck(args) => cuda_check::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Pull(args) => pull::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Serve(args) => serve::run(*args),
    }
}
