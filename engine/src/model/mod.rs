//! Model configuration, weights, and loading a model from a GGUF file.

mod config;
mod requantize;
mod weights;

use std::path::Path;

pub use config::{ModelConfig, RopeLayout};
pub use requantize::{Report, requantize_file};
pub use weights::{Layer, Model};

use crate::gguf::GgufFile;

/// Opens the GGUF file at `path` and loads its model. The file is returned too: the tokenizer
/// and chat template are read from its metadata.
pub fn load(path: impl AsRef<Path>) -> crate::Result<(GgufFile, Model)> {
    let file = GgufFile::open(path)?;
    let model = Model::from_gguf(&file)?;
    Ok((file, model))
}
