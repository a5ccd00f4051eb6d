//! Model configuration and the Llama-family forward pass.

mod config;

pub use config::{ModelConfig, RopeLayout};
