//! Writes a GGUF v3 file as a stream: the header first (every tensor's type and size are
//! known up front), then each tensor's bytes as they are produced, so a model is never held
//! in memory whole.

use std::io::{self, Write};

use super::builder::{ggml_type_id, type_id, write_str, write_value};
use super::tensor::GgmlType;
use super::value::Value;

/// A tensor to be written: its bytes come later, in this order.
#[derive(Debug, Clone)]
pub struct TensorHeader {
    pub name: String,
    /// GGUF order (`dims[0]` innermost).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
}

impl TensorHeader {
    /// Bytes of its data (`None` when the shape is not whole blocks).
    pub fn size(&self) -> Option<u64> {
        self.ty
            .bytes_for(self.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?)
    }
}

/// Writes a GGUF file: `metadata`, then `tensors`, whose bytes `data(i)` returns (checked to be
/// the size their header promised). `alignment` must be a power of two.
pub fn write_gguf<W: Write, E: From<io::Error>>(
    out: &mut W,
    metadata: &[(String, Value)],
    tensors: &[TensorHeader],
    alignment: u64,
    mut data: impl FnMut(usize) -> Result<Vec<u8>, E>,
) -> Result<(), E> {
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        write_str(&mut head, key);
        head.extend_from_slice(&type_id(value).to_le_bytes());
        write_value(&mut head, value);
    }
    let mut sizes = Vec::with_capacity(tensors.len());
    let mut offset = 0u64;
    for t in tensors {
        let size = t.size().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tensor {}: dims {:?} are not whole {} blocks",
                    t.name, t.dims, t.ty
                ),
            )
        })?;
        write_str(&mut head, &t.name);
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&ggml_type_id(t.ty).to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        sizes.push(size);
        offset = (offset + size).next_multiple_of(alignment);
    }
    let pad = |n: u64| vec![0u8; (n.next_multiple_of(alignment) - n) as usize];
    head.extend(pad(head.len() as u64));
    out.write_all(&head)?;
    for (i, &size) in sizes.iter().enumerate() {
        let bytes = data(i)?;
        if bytes.len() as u64 != size {
            let msg = format!(
                "tensor {}: {} bytes, expected {size}",
                tensors[i].name,
                bytes.len()
            );
            return Err(io::Error::new(io::ErrorKind::InvalidData, msg).into());
        }
        out.write_all(&bytes)?;
        if i + 1 < sizes.len() {
            out.write_all(&pad(size))?;
        }
    }
    out.flush()?;
    Ok(())
}
