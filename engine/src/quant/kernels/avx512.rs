//! AVX-512 + VNNI kernels on 256-bit vectors (x86-64). Callers must check
//! [`crate::quant::Simd::detect`] first.
//!
//! The register tile is AVX2's (`int_tile_kernel!`) with two changes: `vpdpbusd` does the
//! byte dot in one instruction instead of `maddubs` + `madd`, and a 5-bit block's high bits
//! become bytes through a mask register instead of a shuffle, an or and a compare. The
//! integers are the same, and so is every float operation and its order: this path gives
//! AVX2's bits. Vectors stay 256 bits wide: a block is 32 bytes, and filling 512 bits with
//! two blocks costs the shuffles it would save.

use std::arch::x86_64::*;

use super::avx2::{Avx2Block, hsum, nibbles};
use crate::quant::blocks::BlockQ8;

/// Lane `l` of the result is `Σ u[j] · y[j]` over `j` in `4 l .. 4 l + 4`, as AVX2's
/// `dot_bytes` (never saturating, so the two agree exactly).
#[target_feature(enable = "avx512vnni,avx512vl")]
#[inline]
fn dot_bytes(u: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y)
}

/// The 5-bit values of a Q5 block as 32 bytes in element order: the nibbles, plus 16 in the
/// bytes whose bit is set in `qh` (bit `j` is element `j`'s).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) fn q5_bytes_evex(qs: &[u8; 16], qh: &u32) -> __m256i {
    let (lo, hi) = nibbles(qs);
    let q4 = _mm256_set_m128i(hi, lo);
    _mm256_mask_add_epi8(q4, *qh, q4, _mm256_set1_epi8(0x10))
}

/// Weight rows per register tile for `r` activation rows: AVX-512VL gives 32 vector registers,
/// so up to 16 accumulators, and each loaded activation block serves more weight rows than on
/// AVX2 (a batch of 32 loads half as many activation blocks per weight block).
const fn tile_weight_rows(r: usize) -> usize {
    match r {
        1 | 2 => 8,
        3 | 4 => 4,
        _ => 2,
    }
}

int_tile_kernel!(
    "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni",
    dot_bytes,
    unpack_evex,
    tile_weight_rows
);
