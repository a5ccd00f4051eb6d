//! `tokenscale-engine`: the replica's command line (generate, serve, pull, bench, cuda-check).

use clap::Parser;

fn main() -> std::process::ExitCode {
    // The start's first phase counts from here (`/metrics`: the engine's start phases).
    tokenscale_engine::runtime::mark_process_start();
    let cli = tokenscale_engine::cli::Cli::parse();
    match tokenscale_engine::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
