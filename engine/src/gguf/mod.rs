//! The GGUF model file format (v2 and v3): metadata, tensor infos and memory-mapped tensor data.
//!
//! Every malformed input is an [`Error`] naming the key, tensor, type or offset at fault; the
//! parser never panics and never allocates more than the file's size justifies.

mod builder;
mod file;
mod parse;
mod tensor;
mod value;
mod writer;

pub use builder::{GgufBuilder, ggml_type_id};
pub use file::GgufFile;
pub use tensor::{GgmlType, TensorInfo};
pub use value::{Value, ValueType};
pub use writer::{TensorHeader, write_gguf};

/// Errors reading a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file: magic bytes are {found:?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {version} (supported: 2, 3)")]
    UnsupportedVersion { version: u32 },
    #[error("file truncated while reading {what} at byte {offset}")]
    Truncated { what: String, offset: u64 },
    #[error("{what}: count {count} at byte {offset} exceeds what the rest of the file can hold")]
    CountTooLarge {
        what: String,
        count: u64,
        offset: u64,
    },
    #[error("{what}: string at byte {offset} is not valid UTF-8")]
    InvalidUtf8 { what: String, offset: u64 },
    #[error("metadata {key}: unknown value type {id} at byte {offset}")]
    UnknownValueType { key: String, id: u32, offset: u64 },
    #[error("metadata {key}: invalid bool byte {byte} at byte {offset}")]
    InvalidBool { key: String, byte: u8, offset: u64 },
    #[error("metadata {key}: arrays nested too deeply at byte {offset}")]
    NestedTooDeep { key: String, offset: u64 },
    #[error("metadata key {key} appears twice")]
    DuplicateKey { key: String },
    #[error("general.alignment must be a power of two, got {value}")]
    BadAlignment { value: String },
    #[error("tensor {tensor}: unknown or unsupported tensor type {id} at byte {offset}")]
    UnknownTensorType {
        tensor: String,
        id: u32,
        offset: u64,
    },
    #[error("tensor {tensor}: bad shape ({reason})")]
    BadDims { tensor: String, reason: String },
    #[error("tensor {name} appears twice")]
    DuplicateTensor { name: String },
    #[error("tensor {tensor}: data offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error(
        "tensor {tensor}: data at offset {offset} ({size} bytes) runs past the end of the \
         file ({file_len} bytes)"
    )]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        size: u64,
        file_len: u64,
    },
    #[error("metadata key {key} is missing")]
    MissingKey { key: String },
    #[error("metadata {key}: expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("tensor {name} is missing")]
    MissingTensor { name: String },
}

#[cfg(test)]
mod tests;

/// Result of GGUF reading.
pub type Result<T, E = Error> = std::result::Result<T, E>;
