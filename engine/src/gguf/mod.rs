//! gguf (being written).

/// Errors reading a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum Error {}
