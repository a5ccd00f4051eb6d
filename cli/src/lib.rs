//! The `tokenscale` command line as a library: each subcommand is a module with its clap
//! arguments and a `run_command`, so `main.rs` only dispatches and tests call them directly.

pub mod bench;
pub mod sim;
pub mod up;
pub mod usage;
