//! The engine crate's error type. Each module keeps its own typed error; this enum wraps them
//! so callers see one `Result` and every message names what failed.

/// Any failure inside the engine library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model file could not be read or is not a valid GGUF file.
    #[error(transparent)]
    Gguf(#[from] crate::gguf::Error),
    /// The model's metadata or tensors do not describe a model this engine can run.
    #[error("model: {0}")]
    Model(String),
    /// A tensor's bytes could not be turned into weights (unsupported type, wrong size).
    #[error("tensor {tensor}: {source}")]
    Tensor {
        tensor: String,
        #[source]
        source: crate::quant::Error,
    },
    /// The tokenizer or chat template could not be built or used.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::Error),
    /// Sampling parameters out of range, or logits that cannot be sampled.
    #[error(transparent)]
    Sampling(#[from] crate::sampling::SamplingError),
    /// The model could not be found or fetched.
    #[error(transparent)]
    Fetch(#[from] crate::fetch::Error),
    /// A compute backend failed (unavailable device, kernel failure, out of memory).
    #[error("backend {backend}: {message}")]
    Backend {
        backend: &'static str,
        message: String,
    },
    /// The device is unusable for the rest of this process (a sticky CUDA error such as an
    /// illegal address or a failed launch): every later call fails the same way, so only a
    /// restart recovers. The engine loop stops on it and the server exits non-zero.
    #[error("backend {backend}: device lost: {message}")]
    DeviceLost {
        backend: &'static str,
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether nothing can succeed after this error in this process (see
    /// [`Error::DeviceLost`]): the replica must stop serving and restart.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Error::DeviceLost { .. })
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
