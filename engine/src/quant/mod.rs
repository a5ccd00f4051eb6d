//! Quantised block formats: dequantisation of GGUF tensors, the in-memory weight layout, and
//! the dot products the forward pass runs on (f32 reference and integer fast path).
//!
//! Weights are repacked at load into blocks with `f32` scales ([`BlockQ4_1`], [`BlockQ4_0`],
//! [`BlockQ8_0`]) so kernels never convert halves; activations for the fast path are quantised
//! per token into [`BlockQ8`] (32 `i8` and an `f32` scale, plus the block's scaled sum so the
//! weight minimum of Q4_1 folds into one multiply — llama.cpp's Q8_1 trick).

mod blocks;
mod dequant;
mod encode;
mod float;
mod kernels;
mod matrix;
pub mod mix;
mod q8;
mod superblocks;

pub use blocks::{
    Block, BlockQ2H, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8, BlockQ8_0, BlockQ8H, QK,
};
pub use dequant::dequantize;
pub use encode::quantize;
pub use float::{FloatRows, SharedBytes};
pub use matrix::{Acts, QMatrix, TILE_ROWS};
pub use q8::{Q8Rows, quantize_q8};
pub use superblocks::QK_K;

use crate::gguf::GgmlType;

/// The block types the engine computes with (F32, F16 and BF16 besides), in the order the
/// README lists them.
pub const BLOCK_TYPES: [GgmlType; 10] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// Errors turning tensor bytes into numbers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "tensor type {0} is not supported (supported: F32, F16, BF16, Q8_0, Q5_0, Q5_1, Q4_0, \
         Q4_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; the IQ, TQ and FP4 families are not)"
    )]
    Unsupported(GgmlType),
    #[error("{ty} data of {bytes} bytes does not hold {elements} elements")]
    SizeMismatch {
        ty: GgmlType,
        bytes: usize,
        elements: usize,
    },
}

/// Which SIMD kernels this CPU runs (detected once at run time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simd {
    /// Portable Rust, any CPU.
    Scalar,
    /// x86-64 AVX2 + FMA.
    Avx2,
}

impl Simd {
    /// The best kernels this CPU supports.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Self::Avx2;
        }
        Self::Scalar
    }
}

#[cfg(test)]
mod tests;
