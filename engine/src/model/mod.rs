//! What a model is, whatever file it comes in: its shape ([`ModelConfig`]), its weights named
//! once ([`Weight`], read through a [`TensorSource`]), and the two checkpoint formats behind
//! that one description ([`Checkpoint`]): a GGUF file, or a Hugging Face directory of
//! safetensors shards with `config.json`.
//!
//! Layout: `config` (the shape), `rope` (RoPE frequencies and their scalings), `tensors`
//! (weight names and the source trait), `weights` (the CPU backend's weights), `gguf` and
//! `hf` (one reader per format).

mod config;
mod gguf;
pub mod hf;
mod requantize;
mod rope;
mod tensors;
mod weights;

use std::path::{Path, PathBuf};

pub use config::{ModelConfig, RopeLayout};
pub use gguf::{GGUF_ARCHITECTURES, GgufSource};
pub use requantize::{Report, requantize_file};
pub use rope::RopeScaling;
pub use tensors::{DType, LayerWeight, SharedBytes, TensorSource, TensorView, Weight};
pub use weights::{Layer, Model};

use crate::gguf::GgufFile;
use crate::{Error, Result};

/// An opened checkpoint of either format.
#[derive(Debug)]
pub enum Checkpoint {
    /// A `.gguf` file: shape, tokenizer and weights in one file.
    Gguf { path: PathBuf, file: GgufFile },
    /// A Hugging Face checkpoint directory.
    Hf(hf::HfCheckpoint),
}

impl Checkpoint {
    /// Opens `path`: a directory with `config.json` is a Hugging Face checkpoint, anything
    /// else is read as a GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path.is_dir() {
            if !hf::HfCheckpoint::is_checkpoint_dir(path) {
                return Err(Error::Model(format!(
                    "{} is a directory without {}: not a Hugging Face checkpoint",
                    path.display(),
                    hf::CONFIG_FILE
                )));
            }
            return Ok(Self::Hf(hf::HfCheckpoint::open(path)?));
        }
        let file = GgufFile::open(path)?;
        Ok(Self::Gguf {
            path: path.to_path_buf(),
            file,
        })
    }

    /// The model's shape.
    pub fn config(&self) -> Result<ModelConfig> {
        match self {
            Self::Gguf { file, .. } => ModelConfig::from_gguf(file),
            Self::Hf(hf) => Ok(hf.config.clone()),
        }
    }

    /// The checkpoint's tensors.
    pub fn tensors(&self) -> Box<dyn TensorSource + '_> {
        match self {
            Self::Gguf { file, .. } => Box::new(GgufSource(file)),
            Self::Hf(hf) => Box::new(&hf.shards),
        }
    }

    /// The model's weights for the CPU backend.
    pub fn load_model(&self) -> Result<Model> {
        Model::load(self.config()?, self.tensors().as_ref())
    }

    /// The tokenizer (GGUF metadata, or the checkpoint's `tokenizer.json` and companions).
    pub fn tokenizer(&self) -> Result<crate::tokenizer::Tokenizer> {
        Ok(match self {
            Self::Gguf { file, .. } => crate::tokenizer::Tokenizer::from_gguf(file)?,
            Self::Hf(hf) => crate::tokenizer::Tokenizer::from_hf_dir(&hf.dir)?,
        })
    }

    /// `gguf` or `safetensors`, for logs and the model card.
    pub fn format(&self) -> &'static str {
        match self {
            Self::Gguf { .. } => "gguf",
            Self::Hf(_) => "safetensors",
        }
    }

    /// Where it was read from.
    pub fn path(&self) -> &Path {
        match self {
            Self::Gguf { path, .. } => path,
            Self::Hf(hf) => &hf.dir,
        }
    }
}

/// Opens the checkpoint at `path` and loads its model (CPU weights). The checkpoint is
/// returned too: the tokenizer is read from it.
pub fn load(path: impl AsRef<Path>) -> Result<(Checkpoint, Model)> {
    let checkpoint = Checkpoint::open(path)?;
    let model = checkpoint.load_model()?;
    Ok((checkpoint, model))
}
