//! AVX2 + FMA kernels (x86-64). Callers must check [`crate::quant::Simd::detect`] first.
//!
//! Integer path per 32-element block: unpack the weights to 32 unsigned bytes once, then for
//! each activation row `maddubs` (u8 × i8 → i16 pairs) and `madd` with ones (→ 8 × i32),
//! convert and accumulate with the product of the two block scales (llama.cpp's scheme); the
//! register tile itself is `int_tile_kernel!`'s. The block unpacking here serves the AVX-512
//! kernels too (`avx512`).

use std::arch::x86_64::*;
use std::ops::Range;

use super::QBlock;
use super::avx512::q5_bytes_evex;
use crate::quant::blocks::{
    BlockQ2H, BlockQ4_0, BlockQ5_0, BlockQ5_1, BlockQ8, BlockQ8_0, BlockQ8H, QK,
};

/// A weight block the AVX2 kernels can unpack.
pub(crate) trait Avx2Block: QBlock {
    /// The weights are signed bytes (Q8_0, Q6_K, Q3_K): `maddubs` needs `|w|` and
    /// `sign(y, w)`.
    const SIGNED: bool;
    /// The block has an offset per half block (Q2_K), applied per lane with the activations'
    /// sums (see [`Avx2Block::lane_mins`]) instead of through the padded block sums.
    const LANE_MINS: bool = false;
    /// The scale of each lane of `madd`'s result (lane `l` covers elements `4 l .. 4 l + 4`):
    /// one scale for the whole block, or one per half.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn scales(&self) -> __m256;
    /// The unsigned byte operand for `maddubs`, and the sign source (for `SIGNED` blocks).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn unpack(&self) -> (__m256i, __m256i);
    /// [`Avx2Block::unpack`] where AVX-512 BW/VL's byte masks may help: the same bytes.
    ///
    /// # Safety
    /// The CPU must support AVX2 and AVX-512 F/BW/VL.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn unpack_evex(&self) -> (__m256i, __m256i) {
        // SAFETY: AVX2 is among this function's features.
        unsafe { self.unpack() }
    }
    /// The 32 dequantised weights as four vectors of 8.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    unsafe fn dequant(&self) -> [__m256; 4];
    /// The offsets `min` of blocks `k0 .. k0 + 8` of `row`, zero past its end (read in place
    /// from the blocks: a copy would add a sixth to the bytes a batch-1 step streams).
    ///
    /// # Safety
    /// The CPU must support AVX2; `k0 < row.len()`.
    #[target_feature(enable = "avx2")]
    unsafe fn mins(_row: &[Self], _k0: usize) -> __m256 {
        _mm256_setzero_ps()
    }
    /// The offset of each lane's elements (for `LANE_MINS` blocks).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn lane_mins(&self) -> __m256 {
        _mm256_setzero_ps()
    }
}

/// `[a × 4, b × 4]`: a scale for each half block, per `madd` lane.
#[target_feature(enable = "avx2")]
#[inline]
fn halves(a: f32, b: f32) -> __m256 {
    _mm256_set_m128(_mm_set1_ps(b), _mm_set1_ps(a))
}

/// 0xFF in byte `j` where bit `j` of `bits` is set, 0 elsewhere (llama.cpp's
/// `bytes_from_bits_32`): each byte of `bits` is copied to eight lanes and compared with a
/// mask that lacks only that lane's bit.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn bytes_from_bits(bits: u32) -> __m256i {
    let spread = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi64x(-1))
}

/// The 5-bit values of a Q5 block as 32 bytes in element order.
#[target_feature(enable = "avx2")]
#[inline]
fn q5_bytes(qs: &[u8; 16], qh: &u32) -> __m256i {
    let (lo, hi) = nibbles(qs);
    let high = _mm256_and_si256(bytes_from_bits(*qh), _mm256_set1_epi8(0x10));
    _mm256_or_si256(_mm256_set_m128i(hi, lo), high)
}

/// Signed weight bytes as `maddubs` takes them: `|w|`, and `w` to sign the activations.
#[target_feature(enable = "avx2")]
#[inline]
fn signed_bytes(qs: &[i8; 32]) -> (__m256i, __m256i) {
    // SAFETY: `qs` is 32 readable bytes; loadu has no alignment requirement.
    let w = unsafe { _mm256_loadu_si256(qs.as_ptr().cast()) };
    (_mm256_sign_epi8(w, w), w)
}

/// 32 unsigned bytes → four vectors of 8 floats.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn widen_u8x32(u: __m256i) -> [__m256; 4] {
    widen_u8(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1))
}

/// 32 signed bytes → four vectors of 8 floats.
#[target_feature(enable = "avx2")]
#[inline]
fn widen_i8x32(w: __m256i) -> [__m256; 4] {
    let (lo, hi) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
        .map(|q| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)))
}

#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn nibbles(qs: &[u8; 16]) -> (__m128i, __m128i) {
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

/// The 4- and 5-bit blocks: `$unpack` gives their values as 32 unsigned bytes, and
/// `d * q + min` is the value, `min` being `$factor` times the block's field `$min_field`
/// (folded in outside the kernels' inner loop).
macro_rules! avx2_nibble_block {
    (
        $block:ty,
        $unpack:ident / $unpack_evex:ident($($field:ident),*),
        $min_field:ident,
        $factor:expr
    ) => {
        impl Avx2Block for $block {
            const SIGNED: bool = false;
            #[target_feature(enable = "avx2")]
            #[inline]
            unsafe fn scales(&self) -> __m256 {
                _mm256_set1_ps(self.d)
            }
            #[target_feature(enable = "avx2")]
            #[inline]
            unsafe fn unpack(&self) -> (__m256i, __m256i) {
                let u = $unpack($(&self.$field),*);
                (u, u)
            }
            #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
            #[inline]
            unsafe fn unpack_evex(&self) -> (__m256i, __m256i) {
                let u = $unpack_evex($(&self.$field),*);
                (u, u)
            }
            #[target_feature(enable = "avx2,fma")]
            #[inline]
            unsafe fn dequant(&self) -> [__m256; 4] {
                let (d, m) = (_mm256_set1_ps(self.d), _mm256_set1_ps(self.min()));
                widen_u8x32($unpack($(&self.$field),*)).map(|q| _mm256_fmadd_ps(q, d, m))
            }
            #[target_feature(enable = "avx2,fma")]
            #[inline]
            unsafe fn mins(row: &[Self], k0: usize) -> __m256 {
                const STRIDE: i32 = (std::mem::size_of::<$block>() / 4) as i32;
                const FIELD: i32 = (std::mem::offset_of!($block, $min_field) / 4) as i32;
                let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                let idx = _mm256_setr_epi32(
                    FIELD,
                    FIELD + STRIDE,
                    FIELD + 2 * STRIDE,
                    FIELD + 3 * STRIDE,
                    FIELD + 4 * STRIDE,
                    FIELD + 5 * STRIDE,
                    FIELD + 6 * STRIDE,
                    FIELD + 7 * STRIDE,
                );
                let left = _mm256_set1_epi32((row.len() - k0).min(8) as i32);
                let valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(left, lanes));
                // SAFETY: `k0 < row.len()`, and lanes past the row's end are masked off, so
                // only `$min_field` of blocks `k0 ..` of `row` are read (4-byte aligned f32s).
                let m = unsafe {
                    let base = row.as_ptr().add(k0).cast::<f32>();
                    _mm256_mask_i32gather_ps::<4>(_mm256_setzero_ps(), base, idx, valid)
                };
                _mm256_mul_ps(m, _mm256_set1_ps($factor))
            }
        }
    };
}

/// A 4-bit block's values as 32 bytes: `qs` holds `q[j]` in the low and `q[j + 16]` in the
/// high nibbles.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn q4_bytes(qs: &[u8; 16]) -> __m256i {
    let (lo, hi) = nibbles(qs);
    _mm256_set_m128i(hi, lo)
}

// Q4_0's values are `d * (q − 8)`: its offset is `−8 d`.
avx2_nibble_block!(BlockQ4_0, q4_bytes / q4_bytes(qs), d, -8.0);
avx2_nibble_block!(BlockQ5_1, q5_bytes / q5_bytes_evex(qs, qh), m, 1.0);

// Q5_0's values are `d * (q − 16)`: its offset is `−16 d`.
avx2_nibble_block!(BlockQ5_0, q5_bytes / q5_bytes_evex(qs, qh), d, -16.0);

impl Avx2Block for BlockQ8H {
    const SIGNED: bool = true;
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn scales(&self) -> __m256 {
        halves(self.d[0], self.d[1])
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack(&self) -> (__m256i, __m256i) {
        signed_bytes(&self.qs)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dequant(&self) -> [__m256; 4] {
        // SAFETY: `qs` is 32 readable bytes; loadu has no alignment requirement.
        let w = unsafe { _mm256_loadu_si256(self.qs.as_ptr().cast()) };
        let [a, b, c, d] = widen_i8x32(w);
        let (d0, d1) = (_mm256_set1_ps(self.d[0]), _mm256_set1_ps(self.d[1]));
        [
            _mm256_mul_ps(a, d0),
            _mm256_mul_ps(b, d0),
            _mm256_mul_ps(c, d1),
            _mm256_mul_ps(d, d1),
        ]
    }
}

impl Avx2Block for BlockQ2H {
    const SIGNED: bool = false;
    const LANE_MINS: bool = true;
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn scales(&self) -> __m256 {
        halves(self.d[0], self.d[1])
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn lane_mins(&self) -> __m256 {
        halves(self.m[0], self.m[1])
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack(&self) -> (__m256i, __m256i) {
        // Byte i holds q[i + 8k] in bits 2k: 64-bit lane k shifted right by 2k has them in
        // bytes 8k .. 8k + 8, in element order.
        let all = _mm256_set1_epi64x(i64::from_le_bytes(self.qs));
        let shifted = _mm256_srlv_epi64(all, _mm256_setr_epi64x(0, 2, 4, 6));
        let u = _mm256_and_si256(shifted, _mm256_set1_epi8(3));
        (u, u)
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dequant(&self) -> [__m256; 4] {
        // SAFETY: AVX2 is this function's feature.
        let [a, b, c, d] = widen_u8x32(unsafe { self.unpack() }.0);
        let (d0, d1) = (_mm256_set1_ps(self.d[0]), _mm256_set1_ps(self.d[1]));
        let (m0, m1) = (_mm256_set1_ps(self.m[0]), _mm256_set1_ps(self.m[1]));
        [
            _mm256_fmadd_ps(a, d0, m0),
            _mm256_fmadd_ps(b, d0, m0),
            _mm256_fmadd_ps(c, d1, m1),
            _mm256_fmadd_ps(d, d1, m1),
        ]
    }
}

impl Avx2Block for BlockQ8_0 {
    const SIGNED: bool = true;
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn scales(&self) -> __m256 {
        _mm256_set1_ps(self.d)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack(&self) -> (__m256i, __m256i) {
        signed_bytes(&self.qs)
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
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// `madd(maddubs(u, y), 1)`: lane `l` of the result is `Σ u[j] · y[j]` over `j` in
/// `4 l .. 4 l + 4` (exact: no pair of products reaches `maddubs`' i16 saturation, as
/// `|u| ≤ 128` and `|y| ≤ 127`).
#[target_feature(enable = "avx2")]
#[inline]
fn dot_bytes(u: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1))
}

/// Weight rows per register tile for `r` activation rows: at most 8 accumulators (of AVX2's
/// 16 registers), and at least 4 independent FMA chains when only one or two rows come.
const fn tile_weight_rows(r: usize) -> usize {
    match r {
        1 | 2 => 4,
        3 | 4 => 2,
        _ => 1,
    }
}

int_tile_kernel!("avx2,fma,f16c", dot_bytes, unpack, tile_weight_rows);

/// Activations → [`BlockQ8`], exactly as `scalar::quantize_q8` (round half away from zero is
/// LLVM's own lowering of `f32::round`: truncate `v + copysign(0.5 − ulp, v)`).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    let sign_bit = _mm256_set1_ps(-0.0);
    let almost_half = _mm256_set1_ps(0.5f32.next_down());
    // packs interleave 128-bit lanes; this puts the 32 bytes back in order.
    let unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (block, xs) in out.iter_mut().zip(x.chunks_exact(QK)) {
        // SAFETY: `xs` holds 32 floats: four loads of 8 at offsets 0, 8, 16, 24.
        let v: [__m256; 4] =
            std::array::from_fn(|i| unsafe { _mm256_loadu_ps(xs.as_ptr().add(8 * i)) });
        let abs = v.map(|v| _mm256_andnot_ps(sign_bit, v));
        let amax = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
        let amax = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        let amax = _mm_max_ps(amax, _mm_movehl_ps(amax, amax));
        let amax = _mm_cvtss_f32(_mm_max_ss(amax, _mm_shuffle_ps(amax, amax, 1)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let q = v.map(|v| {
            let v = _mm256_mul_ps(v, id);
            let half = _mm256_or_ps(almost_half, _mm256_and_ps(sign_bit, v));
            let r = _mm256_round_ps(
                _mm256_add_ps(v, half),
                _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC,
            );
            _mm256_cvttps_epi32(r)
        });
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let sum = _mm_add_epi32(
            _mm256_castsi256_si128(sum),
            _mm256_extracti128_si256(sum, 1),
        );
        let sum = _mm_add_epi32(sum, _mm_unpackhi_epi64(sum, sum));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(sum, _mm_shuffle_epi32(sum, 1)));
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let bytes = _mm256_permutevar8x32_epi32(bytes, unshuffle);
        // SAFETY: `qs` is 32 writable bytes; storeu has no alignment requirement.
        unsafe { _mm256_storeu_si256(block.qs.as_mut_ptr().cast(), bytes) };
        block.d = d;
        block.s = d * sum as f32;
    }
}

/// Weight rows × f32 activations: the reference path with dequantisation in registers.
#[target_feature(enable = "avx2,fma,f16c")]
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
