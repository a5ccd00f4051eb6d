//! AVX2 + FMA kernels (x86-64). Callers must check [`crate::quant::Simd::detect`] first.
//!
//! Integer path per 32-element block: unpack the weights to 32 unsigned bytes once, then for
//! each activation row `maddubs` (u8 × i8 → i16 pairs) and `madd` with ones (→ 8 × i32),
//! convert and accumulate with the product of the two block scales (llama.cpp's scheme).

use std::arch::x86_64::*;
use std::ops::Range;

use super::QBlock;
use crate::quant::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8, BlockQ8_0, QK};

/// A weight block the AVX2 kernels can unpack.
pub(crate) trait Avx2Block: QBlock {
    /// The weights are signed bytes (Q8_0): `maddubs` needs `|w|` and `sign(y, w)`.
    const SIGNED: bool;
    /// The block's scale `d`.
    fn scale(&self) -> f32;
    /// The term added per block besides the scaled integer dot (see `QBlock::dot_q8`).
    fn offset(&self, a: &BlockQ8) -> f32;
    /// The unsigned byte operand for `maddubs`, and the sign source (for `SIGNED` blocks).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn unpack(&self) -> (__m256i, __m256i);
    /// The 32 dequantised weights as four vectors of 8.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    unsafe fn dequant(&self) -> [__m256; 4];
}

#[target_feature(enable = "avx2")]
#[inline]
fn nibbles(qs: &[u8; 16]) -> (__m128i, __m128i) {
    // SAFETY: `qs` is 16 readable bytes; loadu has no alignment requirement.
    let q = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    let m4 = _mm_set1_epi8(0x0F);
    (
        _mm_and_si128(q, m4),
        _mm_and_si128(_mm_srli_epi16(q, 4), m4),
    )
}

#[target_feature(enable = "avx2")]
#[inline]
fn widen_u8(lo: __m128i, hi: __m128i) -> [__m256; 4] {
    [
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)),
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))),
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)),
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))),
    ]
}

impl Avx2Block for BlockQ4_1 {
    const SIGNED: bool = false;
    fn scale(&self) -> f32 {
        self.d
    }
    fn offset(&self, a: &BlockQ8) -> f32 {
        self.m * a.s
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack(&self) -> (__m256i, __m256i) {
        let (lo, hi) = nibbles(&self.qs);
        let u = _mm256_set_m128i(hi, lo);
        (u, u)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dequant(&self) -> [__m256; 4] {
        let (lo, hi) = nibbles(&self.qs);
        let (d, m) = (_mm256_set1_ps(self.d), _mm256_set1_ps(self.m));
        widen_u8(lo, hi).map(|q| _mm256_fmadd_ps(q, d, m))
    }
}

impl Avx2Block for BlockQ4_0 {
    const SIGNED: bool = false;
    fn scale(&self) -> f32 {
        self.d
    }
    fn offset(&self, a: &BlockQ8) -> f32 {
        -8.0 * self.d * a.s
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack(&self) -> (__m256i, __m256i) {
        let (lo, hi) = nibbles(&self.qs);
        let u = _mm256_set_m128i(hi, lo);
        (u, u)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dequant(&self) -> [__m256; 4] {
        let (lo, hi) = nibbles(&self.qs);
        let d = _mm256_set1_ps(self.d);
        let m = _mm256_set1_ps(-8.0 * self.d);
        widen_u8(lo, hi).map(|q| _mm256_fmadd_ps(q, d, m))
    }
}

impl Avx2Block for BlockQ8_0 {
    const SIGNED: bool = true;
    fn scale(&self) -> f32 {
        self.d
    }
    fn offset(&self, _a: &BlockQ8) -> f32 {
        0.0
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack(&self) -> (__m256i, __m256i) {
        // SAFETY: `qs` is 32 readable bytes; loadu has no alignment requirement.
        let w = unsafe { _mm256_loadu_si256(self.qs.as_ptr().cast()) };
        (_mm256_sign_epi8(w, w), w)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dequant(&self) -> [__m256; 4] {
        // SAFETY: `qs` is 32 readable bytes; loadu has no alignment requirement.
        let (lo, hi) = unsafe {
            let p = self.qs.as_ptr().cast::<__m128i>();
            (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1)))
        };
        let d = _mm256_set1_ps(self.d);
        [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
            .map(|q| _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d))
    }
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// Weight rows × quantised activations (see the module docs).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn gemv_q8<B: Avx2Block, const R: usize>(
    w: &[B],
    blocks_per_row: usize,
    rows: Range<usize>,
    acts: [&[BlockQ8]; R],
    out: &mut [f32],
) {
    let n = rows.len();
    let acts = acts.map(|a| &a[..blocks_per_row]);
    let ones = _mm256_set1_epi16(1);
    // One block against all R activation rows; `acc` and `off` must stay in registers, so
    // they are only ever indexed by the (unrolled) constant `r`.
    let step = |wb: &B, k: usize, acc: &mut [__m256; R], off: &mut [f32; R]| {
        // SAFETY: this closure only runs inside this function, on CPUs with AVX2 and FMA.
        let (u, sign) = unsafe { wb.unpack() };
        for r in 0..R {
            let a = &acts[r][k];
            // SAFETY: `qs` is 32 readable bytes; loadu has no alignment requirement.
            let y = unsafe { _mm256_loadu_si256(a.qs.as_ptr().cast()) };
            let y = if B::SIGNED {
                _mm256_sign_epi8(y, sign)
            } else {
                y
            };
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), ones);
            let scale = _mm256_set1_ps(wb.scale() * a.d);
            acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc[r]);
            off[r] += wb.offset(a);
        }
    };
    for (i, row) in rows.enumerate() {
        let wrow = &w[row * blocks_per_row..(row + 1) * blocks_per_row];
        // Two accumulator sets (even/odd blocks) halve the dependency chains.
        let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
        let (mut off0, mut off1) = ([0f32; R], [0f32; R]);
        let mut k = 0;
        while k + 1 < wrow.len() {
            step(&wrow[k], k, &mut acc0, &mut off0);
            step(&wrow[k + 1], k + 1, &mut acc1, &mut off1);
            k += 2;
        }
        if k < wrow.len() {
            step(&wrow[k], k, &mut acc0, &mut off0);
        }
        for r in 0..R {
            out[r * n + i] = hsum(_mm256_add_ps(acc0[r], acc1[r])) + off0[r] + off1[r];
        }
    }
}

/// Weight rows × f32 activations: the reference path with dequantisation in registers.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn gemv_f32<B: Avx2Block, const R: usize>(
    w: &[B],
    blocks_per_row: usize,
    rows: Range<usize>,
    acts: [&[f32]; R],
    out: &mut [f32],
) {
    let n = rows.len();
    let acts = acts.map(|a| &a[..blocks_per_row * QK]);
    for (i, row) in rows.enumerate() {
        let wrow = &w[row * blocks_per_row..(row + 1) * blocks_per_row];
        let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
        for (k, wb) in wrow.iter().enumerate() {
            // SAFETY: this function only runs on CPUs with AVX2 and FMA (its target_feature).
            let [w0, w1, w2, w3] = unsafe { wb.dequant() };
            for r in 0..R {
                let x = &acts[r][k * QK..(k + 1) * QK];
                // SAFETY: `x` holds 32 floats: four loads of 8 at offsets 0, 8, 16, 24.
                let [x0, x1, x2, x3] = unsafe {
                    let p = x.as_ptr();
                    [
                        _mm256_loadu_ps(p),
                        _mm256_loadu_ps(p.add(8)),
                        _mm256_loadu_ps(p.add(16)),
                        _mm256_loadu_ps(p.add(24)),
                    ]
                };
                acc0[r] = _mm256_fmadd_ps(w0, x0, acc0[r]);
                acc1[r] = _mm256_fmadd_ps(w1, x1, acc1[r]);
                acc0[r] = _mm256_fmadd_ps(w2, x2, acc0[r]);
                acc1[r] = _mm256_fmadd_ps(w3, x3, acc1[r]);
            }
        }
        for r in 0..R {
            out[r * n + i] = hsum(_mm256_add_ps(acc0[r], acc1[r]));
        }
    }
}
