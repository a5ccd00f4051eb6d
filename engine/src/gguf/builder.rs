//! A small GGUF writer: builds valid (or deliberately broken) files for tests and fuzz seeds.

use super::parse::DEFAULT_ALIGNMENT;
use super::tensor::GgmlType;
use super::value::Value;

/// Assembles a GGUF v3 file in memory.
#[derive(Debug, Default)]
pub struct GgufBuilder {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

impl GgufBuilder {
    /// An empty file description.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry.
    pub fn kv(mut self, key: &str, value: Value) -> Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a tensor with GGUF-order `dims` and its raw bytes.
    pub fn tensor(mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> Self {
        self.tensors
            .push((name.to_string(), dims.to_vec(), ty, data));
        self
    }

    /// The file's bytes.
    pub fn build(&self) -> Vec<u8> {
        let alignment = self
            .metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_i128())
            .filter(|&a| a > 0) // a deliberately bad alignment still needs a layout here
            .map_or(DEFAULT_ALIGNMENT, |a| a as u64) as usize;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_str(&mut out, key);
            out.extend_from_slice(&type_id(value).to_le_bytes());
            write_value(&mut out, value);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for (name, dims, ty, data) in &self.tensors {
            write_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ggml_type_id(*ty).to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len()).div_ceil(alignment) * alignment;
        }
        let data_start = out.len().div_ceil(alignment) * alignment;
        out.resize(data_start, 0);
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off, 0);
            out.extend_from_slice(data);
        }
        out
    }
}

pub(super) fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(super) fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(..) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

pub(super) fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => write_str(out, s),
        Value::Array(elem, items) => {
            let elem_id = value_type_id(*elem);
            out.extend_from_slice(&elem_id.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, item);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// The on-disk id of a value type.
fn value_type_id(t: super::ValueType) -> u32 {
    (0..=12u32)
        .find(|&id| super::ValueType::from_id(id) == Some(t))
        .unwrap_or(0)
}

/// The on-disk id of a tensor type.
pub fn ggml_type_id(t: GgmlType) -> u32 {
    (0..=63u32)
        .find(|&id| GgmlType::from_id(id) == Some(t))
        .unwrap_or(0)
}
