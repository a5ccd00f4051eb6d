//! AVX2 + F16C kernels' view of the blocks that keep the file's `f16` scales
//! ([`BlockQ4_1F16`]): the scales are widened in registers, by `vcvtph2ps`.

use std::arch::x86_64::*;

use super::avx2::{Avx2Block, q4_bytes, widen_u8x32};
use crate::quant::blocks::BlockQ4_1F16;

/// An `f16` widened to all eight lanes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn splat_f16(h: half::f16) -> __m256 {
    _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h.to_bits()))))
}

impl Avx2Block for BlockQ4_1F16 {
    const SIGNED: bool = false;
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn scales(&self) -> __m256 {
        splat_f16(self.d)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack(&self) -> (__m256i, __m256i) {
        let u = q4_bytes(&self.qs);
        (u, u)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dequant(&self) -> [__m256; 4] {
        let (d, m) = (splat_f16(self.d), splat_f16(self.m));
        widen_u8x32(q4_bytes(&self.qs)).map(|q| _mm256_fmadd_ps(q, d, m))
    }
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn mins(row: &[Self], k0: usize) -> __m256 {
        // SAFETY: `k0 < row.len()` (this function's contract); `m` sits at byte 2 of 20.
        unsafe { gather_f16(row, k0, std::mem::offset_of!(BlockQ4_1F16, m)) }
    }
}

/// The `f16` at byte `offset` of blocks `k0 .. k0 + 8` of `row` (0 past its end), widened.
///
/// # Safety
/// `k0 < row.len()`, and the block holds at least four bytes from `offset`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn gather_f16<B>(row: &[B], k0: usize, offset: usize) -> __m256 {
    let stride = std::mem::size_of::<B>() as i32;
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let offsets = _mm256_add_epi32(
        _mm256_mullo_epi32(lanes, _mm256_set1_epi32(stride)),
        _mm256_set1_epi32(offset as i32),
    );
    let left = _mm256_set1_epi32((row.len() - k0).min(8) as i32);
    let valid = _mm256_cmpgt_epi32(left, lanes);
    // SAFETY: lanes past the row's end are masked off, so only four bytes at `offset` of
    // blocks `k0 ..` of `row` are read (the caller's contract; gathers need no alignment).
    let words = unsafe {
        let base = row.as_ptr().add(k0).cast::<i32>();
        _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), base, offsets, valid)
    };
    let low = _mm256_and_si256(words, _mm256_set1_epi32(0xFFFF));
    // [h0..h3, h0..h3 | h4..h7, h4..h7] → h0..h7 in the low 128 bits.
    let packed = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(low, low));
    _mm256_cvtph_ps(_mm256_castsi256_si128(packed))
}
