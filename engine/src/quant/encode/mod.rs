//! The quantiser's block encoders: f32 values → ggml's on-disk bytes for every type the
//! engine computes with, by llama.cpp's reference algorithms (no importance matrix).

mod kquants;
mod legacy;
mod search;

use rayon::prelude::*;

use super::Error;
use super::blocks::QK;
use super::superblocks::QK_K;
use crate::gguf::GgmlType;

/// Encodes `x` (a whole number of `ty` blocks) as `ty`'s bytes. Blocks are independent, so
/// they are encoded in parallel on the current rayon pool.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Result<Vec<u8>, Error> {
    let size_error = || Error::SizeMismatch {
        ty,
        bytes: 0,
        elements: x.len(),
    };
    let bytes = ty.bytes_for(x.len() as u64).ok_or_else(size_error)? as usize;
    let out = match ty {
        GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => x
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::BF16 => x
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::Q4_0 => blocks::<QK>(x, legacy::q4_0),
        GgmlType::Q4_1 => blocks::<QK>(x, legacy::q4_1),
        GgmlType::Q5_0 => blocks::<QK>(x, legacy::q5_0),
        GgmlType::Q5_1 => blocks::<QK>(x, legacy::q5_1),
        GgmlType::Q8_0 => blocks::<QK>(x, legacy::q8_0),
        GgmlType::Q2K => blocks::<QK_K>(x, kquants::q2_k),
        GgmlType::Q3K => blocks::<QK_K>(x, kquants::q3_k),
        GgmlType::Q4K => blocks::<QK_K>(x, kquants::q4_k),
        GgmlType::Q5K => blocks::<QK_K>(x, kquants::q5_k),
        GgmlType::Q6K => blocks::<QK_K>(x, kquants::q6_k),
        other => return Err(Error::Unsupported(other)),
    };
    debug_assert_eq!(out.len(), bytes);
    Ok(out)
}

/// Runs `encode` over every `N`-element block of `x`, in order.
fn blocks<const N: usize>(x: &[f32], encode: fn(&[f32; N], &mut Vec<u8>)) -> Vec<u8> {
    // Chunks of 64 blocks per task: enough work per task, few allocations.
    let parts: Vec<Vec<u8>> = x
        .par_chunks(64 * N)
        .map(|chunk| {
            let mut out = Vec::new();
            for block in chunk.chunks_exact(N) {
                if let Ok(block) = <&[f32; N]>::try_from(block) {
                    encode(block, &mut out);
                }
            }
            out
        })
        .collect();
    parts.concat()
}
