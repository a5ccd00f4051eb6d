//! The header parser: a bounds-checked cursor over the file's bytes. Every count is checked
//! against the bytes left before anything is allocated, so a hostile file cannot make it
//! allocate more than a small multiple of its own size.

use std::collections::HashMap;

use super::tensor::{GgmlType, TensorInfo};
use super::value::{Value, ValueType};
use super::{Error, Result};

/// `"GGUF"` read as a little-endian u32.
const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section when `general.alignment` is absent.
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest nesting of arrays accepted (real files use at most 2; recursion must stay bounded).
const MAX_ARRAY_DEPTH: usize = 4;
/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;

/// Everything the header says.
#[derive(Debug)]
pub(crate) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_start: u64,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(Error::Truncated {
                what: what.to_string(),
                offset: self.pos as u64,
            });
        };
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit in what is left.
    fn check_count(&self, count: u64, min_size: usize, what: &str) -> Result<usize> {
        let fits = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(min_size).map(|bytes| (c, bytes)))
            .filter(|&(_, bytes)| bytes <= self.remaining());
        match fits {
            Some((c, _)) => Ok(c),
            None => Err(Error::CountTooLarge {
                what: what.to_string(),
                count,
                offset: self.pos as u64,
            }),
        }
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let offset = self.pos as u64;
        let len = self.u64(what)?;
        let len = self.check_count(len, 1, what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::InvalidUtf8 {
            what: what.to_string(),
            offset,
        })
    }

    fn value_type(&mut self, what: &str) -> Result<ValueType> {
        let offset = self.pos as u64;
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or(Error::UnknownValueType {
            key: what.to_string(),
            id,
            offset,
        })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(key)?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(key)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            ValueType::U32 => Value::U32(self.u32(key)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            ValueType::U64 => Value::U64(self.u64(key)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            ValueType::Bool => {
                let offset = self.pos as u64;
                match self.array::<1>(key)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    byte => {
                        return Err(Error::InvalidBool {
                            key: key.to_string(),
                            byte,
                            offset,
                        });
                    }
                }
            }
            ValueType::String => Value::String(self.string(key)?),
            ValueType::Array => self.array_value(key, depth)?,
        })
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Value> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(Error::NestedTooDeep {
                key: key.to_string(),
                offset: self.pos as u64,
            });
        }
        let elem = self.value_type(key)?;
        let count = self.u64(key)?;
        let count = self.check_count(count, elem.min_size(), key)?;
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(self.value(elem, key, depth + 1)?);
        }
        Ok(Value::Array(elem, items))
    }
}

/// Parses the header (magic through tensor infos) and validates every tensor against the
/// file's length.
pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header> {
    let mut cur = Cursor { bytes, pos: 0 };
    let magic = cur.array::<4>("magic")?;
    if magic != MAGIC {
        return Err(Error::BadMagic { found: magic });
    }
    let version = cur.u32("version")?;
    if version != 2 && version != 3 {
        return Err(Error::UnsupportedVersion { version });
    }
    let tensor_count = cur.u64("tensor count")?;
    let kv_count = cur.u64("metadata count")?;
    // key length (8) + value type (4) + the smallest value (1)
    let kv_count = cur.check_count(kv_count, 13, "metadata count")?;

    let mut metadata = Vec::with_capacity(kv_count);
    let mut index = HashMap::with_capacity(kv_count);
    for i in 0..kv_count {
        let key = cur.string(&format!("metadata key #{i}"))?;
        let ty = cur.value_type(&key)?;
        let value = cur.value(ty, &key, 0)?;
        if index.insert(key.clone(), metadata.len()).is_some() {
            return Err(Error::DuplicateKey { key });
        }
        metadata.push((key, value));
    }

    let alignment = match index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_i128() {
            Some(a) if a > 0 && (a as u64).is_power_of_two() && a <= 1 << 30 => a as u64,
            _ => {
                return Err(Error::BadAlignment {
                    value: format!("{v:?}"),
                });
            }
        },
    };

    // name length (8) + dim count (4) + type (4) + offset (8)
    let tensor_count = cur.check_count(tensor_count, 24, "tensor count")?;
    let mut tensors = Vec::with_capacity(tensor_count);
    let mut tensor_index = HashMap::with_capacity(tensor_count);
    for i in 0..tensor_count {
        let info = tensor_info(&mut cur, i)?;
        if tensor_index
            .insert(info.name.clone(), tensors.len())
            .is_some()
        {
            return Err(Error::DuplicateTensor { name: info.name });
        }
        tensors.push(info);
    }

    let data_start = align_up(cur.pos as u64, alignment).ok_or(Error::Truncated {
        what: "data section".into(),
        offset: cur.pos as u64,
    })?;
    for t in &tensors {
        check_tensor_bounds(t, data_start, alignment, bytes.len() as u64)?;
    }
    Ok(Header {
        version,
        metadata,
        index,
        tensors,
        tensor_index,
        alignment,
        data_start,
    })
}

fn tensor_info(cur: &mut Cursor<'_>, i: usize) -> Result<TensorInfo> {
    let name = cur.string(&format!("tensor #{i} name"))?;
    let n_dims = cur.u32(&name)?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(Error::BadDims {
            tensor: name,
            reason: format!("{n_dims} dimensions"),
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(cur.u64(&name)?);
    }
    let type_offset = cur.pos as u64;
    let type_id = cur.u32(&name)?;
    let Some(ggml_type) = GgmlType::from_id(type_id) else {
        return Err(Error::UnknownTensorType {
            tensor: name,
            id: type_id,
            offset: type_offset,
        });
    };
    let offset = cur.u64(&name)?;
    let elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let Some(elements) = elements else {
        return Err(Error::BadDims {
            tensor: name,
            reason: format!("{dims:?} overflows"),
        });
    };
    if dims[0] % ggml_type.block_len() as u64 != 0 {
        let reason = format!("row of {} is not whole {ggml_type} blocks", dims[0]);
        return Err(Error::BadDims {
            tensor: name,
            reason,
        });
    }
    let Some(size_bytes) = ggml_type.bytes_for(elements) else {
        return Err(Error::BadDims {
            tensor: name,
            reason: format!("{dims:?} overflows"),
        });
    };
    Ok(TensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        size_bytes,
    })
}

fn check_tensor_bounds(
    t: &TensorInfo,
    data_start: u64,
    alignment: u64,
    file_len: u64,
) -> Result<()> {
    if !t.offset.is_multiple_of(alignment) {
        return Err(Error::MisalignedTensor {
            tensor: t.name.clone(),
            offset: t.offset,
            alignment,
        });
    }
    let end = data_start
        .checked_add(t.offset)
        .and_then(|s| s.checked_add(t.size_bytes));
    match end {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(Error::TensorOutOfBounds {
            tensor: t.name.clone(),
            offset: t.offset,
            size: t.size_bytes,
            file_len,
        }),
    }
}

fn align_up(pos: u64, alignment: u64) -> Option<u64> {
    Some(pos.checked_add(alignment - 1)? / alignment * alignment)
}
