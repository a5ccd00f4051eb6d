//! `tokenscale-engine`: the replica's command line (generate, serve, pull, bench, cuda-check).

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = tokenscale_engine::cli::Cli::parse();
    match tokenscale_engine::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
