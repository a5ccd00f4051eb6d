//! GGUF tensor bytes (ggml's on-disk layouts) → repacked blocks or plain `f32`.

use half::{bf16, f16};

use super::Error;
use super::blocks::{Block, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK};
use super::superblocks::{repack_q2_k, repack_q3_k, repack_q4_k, repack_q5_k, repack_q6_k};
use crate::gguf::GgmlType;

fn half_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

pub(crate) fn check(ty: GgmlType, bytes: &[u8], elements: usize) -> Result<usize, Error> {
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

fn q5_high_bits(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Repacks Q5_0 bytes (22-byte blocks: `f16 d, u32 high bits, 16 nibble bytes`).
pub(crate) fn repack_q5_0(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ5_0>, Error> {
    let n = check(GgmlType::Q5_0, bytes, elements)?;
    Ok(bytes
        .chunks_exact(22)
        .take(n)
        .map(|b| {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&b[6..22]);
            BlockQ5_0 {
                d: half_at(b, 0),
                qh: q5_high_bits(b, 2),
                qs,
            }
        })
        .collect())
}

/// Repacks Q5_1 bytes (24-byte blocks: `f16 d, f16 m, u32 high bits, 16 nibble bytes`).
pub(crate) fn repack_q5_1(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ5_1>, Error> {
    let n = check(GgmlType::Q5_1, bytes, elements)?;
    Ok(bytes
        .chunks_exact(24)
        .take(n)
        .map(|b| {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&b[8..24]);
            BlockQ5_1 {
                d: half_at(b, 0),
                m: half_at(b, 2),
                qh: q5_high_bits(b, 4),
                qs,
            }
        })
        .collect())
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
/// many elements). Block types go through the same repacked blocks the kernels use, so what a
/// matrix computes with is what this returns.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), Error> {
    let elements = out.len();
    let mut block = [0f32; QK];
    macro_rules! blocks {
        ($repack:expr) => {
            for (o, b) in out.chunks_exact_mut(QK).zip($repack(bytes, elements)?) {
                b.dequantize(&mut block);
                o.copy_from_slice(&block);
            }
        };
    }
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
        GgmlType::Q4_1 => blocks!(repack_q4_1),
        GgmlType::Q4_0 => blocks!(repack_q4_0),
        GgmlType::Q5_0 => blocks!(repack_q5_0),
        GgmlType::Q5_1 => blocks!(repack_q5_1),
        GgmlType::Q8_0 => blocks!(repack_q8_0),
        GgmlType::Q2K => blocks!(repack_q2_k),
        GgmlType::Q3K => blocks!(repack_q3_k),
        GgmlType::Q4K => blocks!(repack_q4_k),
        GgmlType::Q5K => blocks!(repack_q5_k),
        GgmlType::Q6K => blocks!(repack_q6_k),
        other => return Err(Error::Unsupported(other)),
    }
    Ok(())
}
