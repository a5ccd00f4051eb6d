//! GGUF tensor bytes (ggml's on-disk layouts) → repacked blocks or plain `f32`.

use half::{bf16, f16};

use super::Error;
use super::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QK};
use crate::gguf::GgmlType;

fn half_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

fn check(ty: GgmlType, bytes: &[u8], elements: usize) -> Result<usize, Error> {
    let mismatch = || Error::SizeMismatch {
        ty,
        bytes: bytes.len(),
        elements,
    };
    let want = ty.bytes_for(elements as u64).ok_or_else(mismatch)?;
    if want != bytes.len() as u64 {
        return Err(mismatch());
    }
    Ok(elements / ty.block_len())
}

/// Repacks Q4_1 bytes (20-byte blocks: `f16 d, f16 m, 16 nibble bytes`).
pub(crate) fn repack_q4_1(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ4_1>, Error> {
    let n = check(GgmlType::Q4_1, bytes, elements)?;
    Ok(bytes
        .chunks_exact(20)
        .take(n)
        .map(|b| {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&b[4..20]);
            BlockQ4_1 {
                d: half_at(b, 0),
                m: half_at(b, 2),
                qs,
            }
        })
        .collect())
}

/// Repacks Q4_0 bytes (18-byte blocks: `f16 d, 16 nibble bytes`).
pub(crate) fn repack_q4_0(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ4_0>, Error> {
    let n = check(GgmlType::Q4_0, bytes, elements)?;
    Ok(bytes
        .chunks_exact(18)
        .take(n)
        .map(|b| {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&b[2..18]);
            BlockQ4_0 {
                d: half_at(b, 0),
                qs,
            }
        })
        .collect())
}

/// Repacks Q8_0 bytes (34-byte blocks: `f16 d, 32 i8`).
pub(crate) fn repack_q8_0(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ8_0>, Error> {
    let n = check(GgmlType::Q8_0, bytes, elements)?;
    Ok(bytes
        .chunks_exact(34)
        .take(n)
        .map(|b| {
            let mut qs = [0i8; 32];
            for (q, &byte) in qs.iter_mut().zip(&b[2..34]) {
                *q = byte as i8;
            }
            BlockQ8_0 {
                d: half_at(b, 0),
                qs,
            }
        })
        .collect())
}

/// Dequantises `out.len()` elements of type `ty` from `bytes` (which must hold exactly that
/// many elements).
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), Error> {
    let elements = out.len();
    let mut block = [0f32; QK];
    match ty {
        GgmlType::F32 => {
            check(ty, bytes, elements)?;
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            check(ty, bytes, elements)?;
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            check(ty, bytes, elements)?;
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(QK).zip(repack_q4_1(bytes, elements)?) {
                b.dequantize(&mut block);
                o.copy_from_slice(&block);
            }
        }
        GgmlType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(QK).zip(repack_q4_0(bytes, elements)?) {
                b.dequantize(&mut block);
                o.copy_from_slice(&block);
            }
        }
        GgmlType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(QK).zip(repack_q8_0(bytes, elements)?) {
                b.dequantize(&mut block);
                o.copy_from_slice(&block);
            }
        }
        other => return Err(Error::Unsupported(other)),
    }
    Ok(())
}
