//! The x86-64 kernels of the interleaved forms (see `quant::interleaved`): lane `r` of every
//! vector is weight row `r` of a group. AVX-512 holds a group's sixteen rows in one register;
//! AVX2 holds eight, a group in two halves. Each lane sees the same exact integers and then the
//! same float multiplies and FMAs as the portable kernel, so every level gives its bits.

use std::arch::x86_64::*;
use std::ops::Range;

use super::avx2::bytes_from_bits;
use crate::quant::blocks::BlockQ8;
use crate::quant::interleaved::{BlockQ4_1x16, BlockQ5_0x16, BlockQ8x16, GROUP, Lanes};

/// An interleaved form the x86-64 kernels unpack: vector `j` holds each row's stored values
/// `u` of elements `4j .. 4j + 4` (lane `r`: row `r`, or row `8h + r` for AVX2's half `h`).
pub(crate) trait X86Lanes: Lanes {
    /// # Safety
    /// The CPU must support AVX-512 F/BW.
    unsafe fn unpack512(&self) -> [__m512i; 8];
    /// # Safety
    /// The CPU must support AVX2; `h < 2`.
    unsafe fn unpack256(&self, h: usize) -> [__m256i; 8];
}

/// Loads the four nibble chunks (64 bytes each at `at`) as eight vectors of values.
macro_rules! nibble_vectors {
    ($load:ident, $and:ident, $srli:ident, $set1:ident, $zero:ident, $chunks:expr, $at:expr) => {{
        let m4 = $set1(0x0F);
        let mut q = [$zero(); 8];
        for (c, chunk) in $chunks.iter().enumerate() {
            // SAFETY: the vector's bytes lie inside the 64-byte chunk; no alignment needed.
            let v = unsafe { $load(chunk[$at..].as_ptr().cast()) };
            q[c] = $and(v, m4);
            q[c + 4] = $and($srli::<4>(v), m4);
        }
        q
    }};
}

impl X86Lanes for BlockQ5_0x16 {
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn unpack512(&self) -> [__m512i; 8] {
        let mut q = nibble_vectors!(
            _mm512_loadu_si512,
            _mm512_and_si512,
            _mm512_srli_epi16,
            _mm512_set1_epi8,
            _mm512_setzero_si512,
            self.qs,
            0
        );
        let high = _mm512_set1_epi8(0x10);
        for (v, &mask) in q.iter_mut().zip(&self.qh) {
            *v = _mm512_mask_add_epi8(*v, mask, *v, high);
        }
        q
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack256(&self, h: usize) -> [__m256i; 8] {
        let mut q = nibble_vectors!(
            _mm256_loadu_si256,
            _mm256_and_si256,
            _mm256_srli_epi16,
            _mm256_set1_epi8,
            _mm256_setzero_si256,
            self.qs,
            32 * h
        );
        let high = _mm256_set1_epi8(0x10);
        for (v, &mask) in q.iter_mut().zip(&self.qh) {
            let bits = bytes_from_bits((mask >> (32 * h)) as u32);
            *v = _mm256_or_si256(*v, _mm256_and_si256(bits, high));
        }
        q
    }
}

impl X86Lanes for BlockQ4_1x16 {
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn unpack512(&self) -> [__m512i; 8] {
        nibble_vectors!(
            _mm512_loadu_si512,
            _mm512_and_si512,
            _mm512_srli_epi16,
            _mm512_set1_epi8,
            _mm512_setzero_si512,
            self.qs,
            0
        )
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack256(&self, h: usize) -> [__m256i; 8] {
        nibble_vectors!(
            _mm256_loadu_si256,
            _mm256_and_si256,
            _mm256_srli_epi16,
            _mm256_set1_epi8,
            _mm256_setzero_si256,
            self.qs,
            32 * h
        )
    }
}

impl<const H: usize> X86Lanes for BlockQ8x16<H> {
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn unpack512(&self) -> [__m512i; 8] {
        // SAFETY: each quad is 64 readable bytes; loadu has no alignment requirement.
        self.qs
            .map(|q| unsafe { _mm512_loadu_si512(q.as_ptr().cast()) })
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn unpack256(&self, h: usize) -> [__m256i; 8] {
        // SAFETY: bytes `32 h ..` of a quad are 32 readable bytes.
        self.qs
            .map(|q| unsafe { _mm256_loadu_si256(q[32 * h..].as_ptr().cast()) })
    }
}

/// The operands of one call: the groups' blocks, and each activation row's Q8 blocks and
/// their integer sums per half block (`Q8Rows::ysums`).
pub(crate) struct Operands<'a, B, const R: usize> {
    pub w: &'a [B],
    pub blocks_per_row: usize,
    pub acts: [&'a [BlockQ8]; R],
    pub ysums: [&'a [i32]; R],
}

/// Bytes `4j .. 4j + 4` of an activation block as one little-endian word (broadcast to every
/// lane: each lane's four weights meet the same four activations).
#[inline(always)]
fn quad(a: &BlockQ8, j: usize) -> i32 {
    let q = &a.qs[4 * j..4 * j + 4];
    i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
}

/// Writes rows `lo .. hi` of group `g` (its sixteen lanes per activation row in `lanes`) to
/// `out[r * n + row − start]`.
#[inline(always)]
fn scatter<const R: usize>(
    lanes: &[[f32; GROUP]; R],
    g: usize,
    rows: &Range<usize>,
    out: &mut [f32],
) {
    let n = rows.len();
    let (lo, hi) = (rows.start.max(g * GROUP), rows.end.min(g * GROUP + GROUP));
    for (r, lane) in lanes.iter().enumerate() {
        out[r * n + lo - rows.start..][..hi - lo]
            .copy_from_slice(&lane[lo - g * GROUP..hi - g * GROUP]);
    }
}

/// AVX-512 + VNNI: weight rows × quantised activations, `out[r * n + i]`.
///
/// Per activation row and block the integer dot is one `vpdpbusd` chain starting from the
/// offset term when a tile has rows enough to keep several chains in flight (two halves'
/// chains otherwise, added after): the same exact integer either way, one broadcast and one
/// add less per row.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn gemv_q8_avx512<B: X86Lanes, const R: usize>(
    ops: &Operands<'_, B, R>,
    rows: Range<usize>,
    out: &mut [f32],
) {
    const { assert!(R <= 8, "`unrolled!` covers tiles up to 8 rows") };
    let bpr = ops.blocks_per_row;
    // Checked once here, so the loop below indexes block `k < bpr` of every row unchecked.
    let acts: [&[BlockQ8]; R] = ops.acts.map(|a| &a[..bpr]);
    let ysums: [&[[i32; 2]]; R] = ops.ysums.map(|y| &y.as_chunks::<2>().0[..bpr]);
    let mut g = rows.start / GROUP;
    while g * GROUP < rows.end {
        let mut acc = [_mm512_setzero_ps(); R];
        for (k, b) in ops.w[g * bpr..][..bpr].iter().enumerate() {
            // SAFETY: AVX-512 F/BW are among this function's features.
            let q = unsafe { b.unpack512() };
            // SAFETY: each scale and offset array is 16 readable floats.
            let [d0, d1] = b.scales().map(|d| unsafe { _mm512_loadu_ps(d.as_ptr()) });
            let m = unsafe { _mm512_loadu_ps(b.mins().as_ptr()) };
            unrolled!(r < R => {
                // SAFETY: `k < bpr`, the length both slices were cut to above.
                let (a, y) = unsafe { (acts[r].get_unchecked(k), ysums[r].get_unchecked(k)) };
                let da = _mm512_set1_ps(a.d);
                if B::HALVES || R < 4 {
                    // The two halves' integers, each with its offset taken off.
                    let mut lo = _mm512_set1_epi32(-B::OFFSET * y[0]);
                    let mut hi = _mm512_set1_epi32(-B::OFFSET * y[1]);
                    unrolled!(j < 4 => {
                        lo = _mm512_dpbusd_epi32(lo, q[j], _mm512_set1_epi32(quad(a, j)));
                        hi = _mm512_dpbusd_epi32(hi, q[j + 4], _mm512_set1_epi32(quad(a, j + 4)));
                    });
                    if B::HALVES {
                        let s0 = _mm512_mul_ps(d0, da);
                        acc[r] = _mm512_fmadd_ps(s0, _mm512_cvtepi32_ps(lo), acc[r]);
                        let s1 = _mm512_mul_ps(d1, da);
                        acc[r] = _mm512_fmadd_ps(s1, _mm512_cvtepi32_ps(hi), acc[r]);
                    } else {
                        let dot = _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi));
                        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d0, da), dot, acc[r]);
                    }
                } else {
                    let mut dot = _mm512_set1_epi32(-B::OFFSET * (y[0] + y[1]));
                    unrolled!(j < 8 => {
                        dot = _mm512_dpbusd_epi32(dot, q[j], _mm512_set1_epi32(quad(a, j)));
                    });
                    let dot = _mm512_cvtepi32_ps(dot);
                    acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d0, da), dot, acc[r]);
                }
                if B::MIN {
                    acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.s), acc[r]);
                }
            });
        }
        let mut lanes = [[0f32; GROUP]; R];
        unrolled!(r < R => {
            // SAFETY: a lane row is 16 writable floats.
            unsafe { _mm512_storeu_ps(lanes[r].as_mut_ptr(), acc[r]) };
        });
        scatter(&lanes, g, &rows, out);
        g += 1;
    }
}

/// The integer dot of one vector of four-element groups with a broadcast activation quad
/// (`maddubs` + `madd`: unsigned values below 32, or `|w| ≤ 128` with the sign moved onto the
/// activations, never saturate).
#[target_feature(enable = "avx2")]
#[inline]
fn dot4<B: Lanes>(u: __m256i, y: __m256i) -> __m256i {
    let p = if B::OFFSET == 128 {
        let w = _mm256_xor_si256(u, _mm256_set1_epi8(-128));
        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w))
    } else {
        _mm256_maddubs_epi16(u, y)
    };
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// AVX2: the same per lane, eight rows to a register.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn gemv_q8_avx2<B: X86Lanes, const R: usize>(
    ops: &Operands<'_, B, R>,
    rows: Range<usize>,
    out: &mut [f32],
) {
    const { assert!(R <= 8, "`unrolled!` covers tiles up to 8 rows") };
    let bpr = ops.blocks_per_row;
    // Signed bytes come back as `w` itself: no offset left to take off.
    let offset = if B::OFFSET == 128 { 0 } else { B::OFFSET };
    let mut g = rows.start / GROUP;
    while g * GROUP < rows.end {
        let mut lanes = [[0f32; GROUP]; R];
        for h in 0..2 {
            let mut acc = [_mm256_setzero_ps(); R];
            for (k, b) in ops.w[g * bpr..][..bpr].iter().enumerate() {
                // SAFETY: AVX2 is among this function's features; `h < 2`.
                let q = unsafe { b.unpack256(h) };
                // SAFETY: floats `8 h ..` of each 16-float array are 8 readable floats.
                let [d0, d1] = b
                    .scales()
                    .map(|d| unsafe { _mm256_loadu_ps(d[8 * h..].as_ptr()) });
                let m = unsafe { _mm256_loadu_ps(b.mins()[8 * h..].as_ptr()) };
                unrolled!(r < R => {
                    let a = &ops.acts[r][k];
                    let y = &ops.ysums[r][2 * k..2 * k + 2];
                    let mut lo = _mm256_set1_epi32(-offset * y[0]);
                    let mut hi = _mm256_set1_epi32(-offset * y[1]);
                    unrolled!(j < 4 => {
                        lo = _mm256_add_epi32(lo, dot4::<B>(q[j], _mm256_set1_epi32(quad(a, j))));
                        let yj = _mm256_set1_epi32(quad(a, j + 4));
                        hi = _mm256_add_epi32(hi, dot4::<B>(q[j + 4], yj));
                    });
                    let da = _mm256_set1_ps(a.d);
                    if B::HALVES {
                        let s0 = _mm256_mul_ps(d0, da);
                        acc[r] = _mm256_fmadd_ps(s0, _mm256_cvtepi32_ps(lo), acc[r]);
                        let s1 = _mm256_mul_ps(d1, da);
                        acc[r] = _mm256_fmadd_ps(s1, _mm256_cvtepi32_ps(hi), acc[r]);
                    } else {
                        let dot = _mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi));
                        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d0, da), dot, acc[r]);
                    }
                    if B::MIN {
                        acc[r] = _mm256_fmadd_ps(m, _mm256_set1_ps(a.s), acc[r]);
                    }
                });
            }
            unrolled!(r < R => {
                // SAFETY: `lanes[r][8 h ..]` is 8 writable floats.
                unsafe { _mm256_storeu_ps(lanes[r][8 * h..].as_mut_ptr(), acc[r]) };
            });
        }
        scatter(&lanes, g, &rows, out);
        g += 1;
    }
}
