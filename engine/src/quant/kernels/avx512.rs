//! AVX-512 + VNNI kernels (x86-64). Callers must check [`crate::quant::Simd::detect`] first.
//!
//! The register tile holds two weight rows per 512-bit register: the low half is row `2p`'s
//! eight lanes, the high half row `2p + 1`'s, and the activation block is broadcast to both
//! halves. Every lane then sees exactly the operations, in the same order, that AVX2's
//! 256-bit tile (`int_tile_kernel!`) applies to that row's lane, so this path gives AVX2's
//! bits. What changes is how many instructions carry them: one `vpdpbusd`, one convert, one
//! multiply and one FMA serve two weight rows, and on cores with two 512-bit FMA units the
//! float work also runs on the port that 256-bit FMAs cannot use (halving the instructions of
//! the decode step's inner loop, where a batch of sequences makes it compute-bound).
//!
//! Two blocks of one row side by side (the other way to fill 512 bits) would reorder each
//! accumulator's additions and need shuffles to fold the halves.

use std::arch::x86_64::*;

use super::avx2::{Avx2Block, hsum, nibbles};
use crate::quant::blocks::BlockQ8;

/// The 5-bit values of a Q5 block as 32 bytes in element order: the nibbles, plus 16 in the
/// bytes whose bit is set in `qh` (bit `j` is element `j`'s).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) fn q5_bytes_evex(qs: &[u8; 16], qh: &u32) -> __m256i {
    let (lo, hi) = nibbles(qs);
    let q4 = _mm256_set_m128i(hi, lo);
    _mm256_mask_add_epi8(q4, *qh, q4, _mm256_set1_epi8(0x10))
}

/// Register pairs of weight rows per tile for `r` activation rows: `pairs × r` accumulators,
/// at most 16 of the 32 vector registers, the rest for operands.
const fn tile_pairs(r: usize) -> usize {
    match r {
        1..=4 => 4,
        _ => 2,
    }
}

/// `[lo, hi]` as one 512-bit register (through 64-bit lanes: AVX-512F alone, no DQ).
#[target_feature(enable = "avx512f")]
#[inline]
fn join_ps(lo: __m256, hi: __m256) -> __m512 {
    let (lo, hi) = (_mm256_castps_pd(lo), _mm256_castps_pd(hi));
    _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castpd256_pd512(lo), hi))
}

/// The high half of `v`.
#[target_feature(enable = "avx512f")]
#[inline]
fn high_ps(v: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
}

#[target_feature(enable = "avx512f")]
#[inline]
fn join_si(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// Weight rows × quantised activations; `out[r * n + i]` is weight row `rows.start + i`
/// against activation row `r` (`n = rows.len()`). `sums[r]` holds the padded block sums of
/// activation row `r` (see `Q8Rows`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn gemv_q8<B: Avx2Block, const R: usize>(
    w: &[B],
    blocks_per_row: usize,
    rows: std::ops::Range<usize>,
    acts: [&[BlockQ8]; R],
    sums: [&[f32]; R],
    out: &mut [f32],
) {
    let n = rows.len();
    let tile = super::Tile::new(w, blocks_per_row, acts, sums);
    let pairs = tile_pairs(R);
    let mut i = 0;
    while i + 2 * pairs <= n {
        match pairs {
            4 => tile.row_pairs::<4>(rows.start, i, n, n, out),
            _ => tile.row_pairs::<2>(rows.start, i, n, n, out),
        }
        i += 2 * pairs;
    }
    // The last one to seven rows, a pair at a time; an odd last row is paired with itself
    // (its twin's results are dropped).
    while i < n {
        tile.row_pairs::<1>(rows.start, i, n, n.min(i + 2), out);
        i += 2;
    }
}

impl<B: Avx2Block, const R: usize> super::Tile<'_, B, R> {
    /// Weight rows `start + i .. start + i + 2 P` (those below `start + end`) against every
    /// activation row, written to `out[r * n + i ..]`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    fn row_pairs<const P: usize>(
        &self,
        start: usize,
        i: usize,
        n: usize,
        end: usize,
        out: &mut [f32],
    ) {
        const { assert!(P <= 8 && R <= 8, "`unrolled!` covers tiles up to 8 × 8") };
        let bpr = self.blocks_per_row;
        // Row `2p + h` of the tile, or the last real row past `end`.
        let mut wrows: [[&[B]; 2]; P] = [[&[]; 2]; P];
        unrolled!(p < P => {
            for (h, wrow) in wrows[p].iter_mut().enumerate() {
                let row = start + (i + 2 * p + h).min(end - 1);
                *wrow = &self.w[row * bpr..][..bpr];
            }
        });
        let acts = &self.acts;
        let ones_u8 = _mm512_set1_epi8(1);
        let bias = _mm512_set1_epi8(-128);
        let mut acc = [[_mm512_setzero_ps(); R]; P];
        for k in 0..bpr {
            let mut u = [_mm512_setzero_si512(); P];
            let mut dw = [_mm512_setzero_ps(); P];
            let mut mw = [_mm512_setzero_ps(); P];
            unrolled!(p < P => {
                // SAFETY: `k < bpr`, the length of every row slice; this function only runs
                // on CPUs with AVX-512 F/BW/VL + VNNI (its target_feature), which have AVX2.
                let (a, b) = unsafe { (wrows[p][0].get_unchecked(k), wrows[p][1].get_unchecked(k)) };
                let (ua, sa) = unsafe { a.unpack_evex() };
                let (ub, sb) = unsafe { b.unpack_evex() };
                u[p] = if B::SIGNED {
                    // `w + 128` as unsigned bytes; the activations' `128 Σ y` is taken back
                    // off below, so the integer is `Σ w y` exactly, as AVX2's sign trick gives.
                    _mm512_xor_si512(join_si(sa, sb), bias)
                } else {
                    join_si(ua, ub)
                };
                dw[p] = unsafe { join_ps(a.scales(), b.scales()) };
                if B::LANE_MINS {
                    mw[p] = unsafe { join_ps(a.lane_mins(), b.lane_mins()) };
                }
            });
            unrolled!(r < R => {
                // SAFETY: `k < bpr`, the length of every activation row slice.
                let a = unsafe { acts[r].get_unchecked(k) };
                // SAFETY: `qs` is 32 readable bytes; loadu has no alignment requirement.
                let y = _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(a.qs.as_ptr().cast()) });
                let da = _mm512_set1_ps(a.d);
                // The integer each dot starts from: `−128 Σ y` per lane for signed weights.
                let start = if B::SIGNED {
                    let biased = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, y);
                    _mm512_sub_epi32(_mm512_setzero_si512(), biased)
                } else {
                    _mm512_setzero_si512()
                };
                let ysum = if B::LANE_MINS {
                    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones_u8, y))
                } else {
                    _mm512_setzero_ps()
                };
                unrolled!(p < P => {
                    let dot = _mm512_dpbusd_epi32(start, u[p], y);
                    let scale = _mm512_mul_ps(dw[p], da);
                    acc[p][r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[p][r]);
                    if B::LANE_MINS {
                        let m = _mm512_mul_ps(mw[p], da);
                        acc[p][r] = _mm512_fmadd_ps(m, ysum, acc[p][r]);
                    }
                });
            });
        }
        if B::HAS_MIN {
            // Σ_k min[k] · s[k], 8 blocks a step, as AVX2's tile does it.
            unrolled!(p < P => {
                for k0 in (0..bpr).step_by(8) {
                    // SAFETY: `k0 < bpr`, the rows' length; AVX2 is among this function's
                    // features.
                    let m = unsafe { join_ps(B::mins(wrows[p][0], k0), B::mins(wrows[p][1], k0)) };
                    unrolled!(r < R => {
                        let s = &self.sums[r][k0..k0 + 8];
                        // SAFETY: `s` is 8 readable floats.
                        let s = unsafe { _mm256_loadu_ps(s.as_ptr()) };
                        acc[p][r] = _mm512_fmadd_ps(m, join_ps(s, s), acc[p][r]);
                    });
                }
            });
        }
        unrolled!(p < P => {
            unrolled!(r < R => {
                let row = i + 2 * p;
                let v = acc[p][r];
                out[r * n + row] = hsum(_mm512_castps512_ps256(v));
                if row + 1 < end {
                    out[r * n + row + 1] = hsum(high_ps(v));
                }
            });
        });
    }
}
