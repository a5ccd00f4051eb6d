//! Quantised block formats: dequantisation of GGUF tensors, the in-memory weight layout, and
//! the dot products the forward pass runs on (f32 reference and integer fast path).
//!
//! Weights are repacked at load into blocks with `f32` scales ([`BlockQ4_1`], [`BlockQ4_0`],
//! [`BlockQ8_0`]) so kernels never convert halves. Q4_1, Q5_0, Q8_0, Q4_K, Q6_K and Q3_K are
//! then interleaved sixteen rows to a block (`interleaved`: one weight row per vector lane, a
//! block scaled once per sixteen rows). Q4_1 once kept the file's 20-byte blocks row by row
//! (a sixth fewer bytes to stream, 1.14x on a one-sequence step then); interleaved, with 24
//! bytes a block, a one-sequence step took 2.7 ms instead of 5.0, a 4 × 128-token prefill step
//! 370 ms instead of 763 and a 32-sequence step 38 ms instead of 58 (SmolLM2-135M, 2 cores):
//! the row layout spent a convert, a multiply and an FMA on every integer dot. Activations for the fast path are quantised
//! per token into [`BlockQ8`] (32 `i8` and an `f32` scale, plus the block's scaled sum so the
//! weight minimum of Q4_1 folds into one multiply — llama.cpp's Q8_1 trick).

mod blocks;
mod dequant;
mod encode;
mod float;
mod interleaved;
mod kernels;
mod matrix;
pub mod mix;
mod pages;
mod q8;
mod superblocks;

pub use blocks::{
    Block, BlockQ2H, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8, BlockQ8_0, BlockQ8H, QK,
};
pub use dequant::dequantize;
pub use encode::quantize;
pub use float::{FloatRows, SharedBytes};
pub use matrix::{Acts, QMatrix, TILE_ROWS};
pub use pages::advise_huge_pages;
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

/// The environment variable that caps the kernels below what the CPU offers (`scalar`,
/// `avx2`, `avx512`): benchmarks and tests of the lower paths on a machine with the higher.
pub const SIMD_ENV: &str = "TOKENSCALE_SIMD";

/// Which SIMD kernels this CPU runs (detected once at run time). Ordered: each variant's CPU
/// also runs every lower one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Simd {
    /// Portable Rust, any CPU.
    Scalar,
    /// x86-64 AVX2 + FMA (+ F16C, which widens Q4_1's `f16` scales).
    Avx2,
    /// x86-64 AVX2 + FMA with AVX-512 F/BW/VL and VNNI, used on 256-bit vectors: `vpdpbusd`
    /// replaces AVX2's two-step byte dot, and byte masks unpack the 5-bit blocks.
    Avx512,
}

impl Simd {
    /// The best kernels this CPU supports, capped by [`SIMD_ENV`] when it is set (read once
    /// per process: every matrix of a model then runs the same kernels).
    pub fn detect() -> Self {
        static CHOSEN: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let (chosen, warning) = Self::capped(Self::best(), std::env::var(SIMD_ENV).ok());
            if let Some(warning) = warning {
                tracing::warn!("{warning}");
            }
            chosen
        })
    }

    /// `best` capped by the value of [`SIMD_ENV`], and what to warn about: a value that names
    /// no path is ignored, and one above `best` cannot raise it (either would otherwise
    /// benchmark another path than the one asked for, silently).
    fn capped(best: Self, value: Option<String>) -> (Self, Option<String>) {
        let Some(value) = value else {
            return (best, None);
        };
        match Self::parse(&value) {
            None => (
                best,
                Some(format!(
                    "{SIMD_ENV}={value:?} is not one of scalar, avx2, avx512: ignored, running {best:?}"
                )),
            ),
            Some(cap) if cap > best => (
                best,
                Some(format!(
                    "{SIMD_ENV}={value} is above what this CPU runs: running {best:?}"
                )),
            ),
            Some(cap) => (cap, None),
        }
    }

    /// Every path this CPU runs, lowest first (tests compare them all).
    pub fn available() -> Vec<Self> {
        let best = Self::best();
        [Self::Scalar, Self::Avx2, Self::Avx512]
            .into_iter()
            .filter(|s| *s <= best)
            .collect()
    }

    /// Whether the AVX2 + FMA kernels may run (true for every path above them too).
    pub fn has_avx2(self) -> bool {
        self >= Self::Avx2
    }

    /// A name as [`SIMD_ENV`] takes it.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Self::Scalar),
            "avx2" => Some(Self::Avx2),
            "avx512" => Some(Self::Avx512),
            _ => None,
        }
    }

    fn best() -> Self {
        #[cfg(target_arch = "x86_64")]
        // F16C widens the `f16` scales of Q4_1 blocks (every AVX2 CPU has it).
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            let avx512 = is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni");
            return if avx512 { Self::Avx512 } else { Self::Avx2 };
        }
        Self::Scalar
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_interleaved;
