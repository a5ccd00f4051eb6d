//! A Hugging Face checkpoint directory: `config.json` (the model's shape), safetensors shards
//! (the weights), and the tokenizer files the tokenizer module reads (`tokenizer.json`,
//! `tokenizer_config.json`, `generation_config.json`).

mod config;
mod safetensors;

use std::path::{Path, PathBuf};

pub use self::config::{HF_ARCHITECTURES, parse_config};
pub use self::safetensors::{INDEX_FILE, SINGLE_FILE, Shards};
use super::config::ModelConfig;
use crate::{Error, Result};

/// The configuration file every checkpoint has.
pub const CONFIG_FILE: &str = "config.json";

/// An opened checkpoint directory.
#[derive(Debug)]
pub struct HfCheckpoint {
    pub dir: PathBuf,
    pub config: ModelConfig,
    pub shards: Shards,
}

impl HfCheckpoint {
    /// Reads `config.json` and maps the shards of the checkpoint in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let config_path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&config_path).map_err(|source| Error::Io {
            what: format!("reading {}", config_path.display()),
            source,
        })?;
        let config = parse_config(&text, &config_path.display().to_string())?;
        let shards = Shards::open(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            shards,
        })
    }

    /// Whether `dir` looks like a checkpoint directory (has `config.json`).
    pub fn is_checkpoint_dir(dir: &Path) -> bool {
        dir.is_dir() && dir.join(CONFIG_FILE).is_file()
    }
}

#[cfg(test)]
mod tests;
