//! An opened GGUF file: parsed header plus the file's bytes (memory-mapped or owned).

use std::path::Path;

use super::parse::{Header, parse_header};
use super::tensor::TensorInfo;
use super::value::Value;
use super::{Error, Result};

/// Where the file's bytes live.
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Owned(vec) => vec,
        }
    }
}

/// A parsed GGUF file. Tensor data stays in the (mapped) file until asked for.
pub struct GgufFile {
    bytes: Bytes,
    header: Header,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.header.version)
            .field("metadata", &self.header.metadata.len())
            .field("tensors", &self.header.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens and memory-maps `path`, then parses and validates its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. Another process truncating
        // or rewriting the model file while it is served would be undefined behaviour; model
        // files are written once (fetch writes to a temporary name and renames) and never
        // modified in place, which is the contract every mmap-based model loader relies on.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let header = parse_header(&map)?;
        Ok(Self {
            bytes: Bytes::Mapped(map),
            header,
        })
    }

    /// Parses a GGUF file held in memory (tests, fuzzing).
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        Self::from_vec(bytes.to_vec())
    }

    /// Parses a GGUF file held in memory, taking ownership of the bytes.
    pub fn from_vec(bytes: Vec<u8>) -> Result<Self> {
        let header = parse_header(&bytes)?;
        Ok(Self {
            bytes: Bytes::Owned(bytes),
            header,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Alignment of tensor data in bytes.
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.header.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.header
            .index
            .get(key)
            .map(|&i| &self.header.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| Error::MissingKey {
            key: key.to_string(),
        })
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| wrong_type(key, "string", v))
    }

    /// An integer value of any width that fits in `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        let v = self.require(key)?;
        v.as_i128()
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| wrong_type(key, "u32", v))
    }

    /// An integer value of any width that fits in `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_i128()
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| wrong_type(key, "u64", v))
    }

    /// An `f32` or `f64` value, as `f32`.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|f| f as f32)
            .ok_or_else(|| wrong_type(key, "f32", v))
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(wrong_type(key, "bool", v)),
        }
    }

    /// The items of an array value.
    pub fn get_array(&self, key: &str) -> Result<&[Value]> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| wrong_type(key, "array", v))
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        let items = self.get_array(key)?;
        items
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| wrong_type(key, "array of string", v))
            })
            .collect()
    }

    /// An array of integers (any width) that fit in `i32`.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        let items = self.get_array(key)?;
        let item = |v: &Value| v.as_i128().and_then(|i| i32::try_from(i).ok());
        items
            .iter()
            .map(|v| item(v).ok_or_else(|| wrong_type(key, "array of i32", v)))
            .collect()
    }

    /// An array of floats (`f32` or `f64`), as `f32`.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        let items = self.get_array(key)?;
        let item = |v: &Value| v.as_f64().map(|f| f as f32);
        items
            .iter()
            .map(|v| item(v).ok_or_else(|| wrong_type(key, "array of f32", v)))
            .collect()
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    /// The info of tensor `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.header
            .tensor_index
            .get(name)
            .map(|&i| &self.header.tensors[i])
    }

    /// The raw bytes of tensor `name` (bounds were validated when the file was parsed).
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensor(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
        })?;
        let bytes = self.bytes.as_slice();
        let out_of_bounds = || Error::TensorOutOfBounds {
            tensor: name.to_string(),
            offset: info.offset,
            size: info.size_bytes,
            file_len: bytes.len() as u64,
        };
        let start = self
            .header
            .data_start
            .checked_add(info.offset)
            .ok_or_else(out_of_bounds)?;
        let end = start
            .checked_add(info.size_bytes)
            .ok_or_else(out_of_bounds)?;
        let (start, end) = (usize::try_from(start), usize::try_from(end));
        let (Ok(start), Ok(end)) = (start, end) else {
            return Err(out_of_bounds());
        };
        bytes.get(start..end).ok_or_else(out_of_bounds)
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> Error {
    Error::WrongType {
        key: key.to_string(),
        expected,
        found: found.value_type().to_string(),
    }
}
