//! The x86-64 kernels of [`BlockQ5_0x16`] (see `quant::interleaved`): lane `r` of every vector
//! is weight row `r` of a group. AVX-512 holds a group's sixteen rows in one register; AVX2
//! holds eight, a group in two halves. Each lane sees the same exact integer and then the same
//! float multiply and FMA, so both levels give the portable kernel's bits.

use std::arch::x86_64::*;
use std::ops::Range;

use super::avx2::bytes_from_bits;
use crate::quant::blocks::BlockQ8;
use crate::quant::interleaved::{BlockQ5_0x16, GROUP};

/// The operands of one call: the groups' blocks, each activation row's Q8 blocks and their
/// integer sums (`Q8Rows::ysums`).
pub(crate) struct Operands<'a, const R: usize> {
    pub w: &'a [BlockQ5_0x16],
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
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn gemv_q8_avx512<const R: usize>(
    ops: &Operands<'_, R>,
    rows: Range<usize>,
    out: &mut [f32],
) {
    const { assert!(R <= 8, "`unrolled!` covers tiles up to 8 rows") };
    let bpr = ops.blocks_per_row;
    let (m4, high) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x10));
    let mut g = rows.start / GROUP;
    while g * GROUP < rows.end {
        let blocks = &ops.w[g * bpr..][..bpr];
        let mut acc = [_mm512_setzero_ps(); R];
        for (k, b) in blocks.iter().enumerate() {
            let mut q = [_mm512_setzero_si512(); 8];
            unrolled!(c < 4 => {
                // SAFETY: a chunk is 64 readable bytes; loadu has no alignment requirement.
                let v = unsafe { _mm512_loadu_si512(b.qs[c].as_ptr().cast()) };
                q[c] = _mm512_and_si512(v, m4);
                q[c + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
            });
            unrolled!(j < 8 => {
                q[j] = _mm512_mask_add_epi8(q[j], b.qh[j], q[j], high);
            });
            // SAFETY: `d` is 16 readable floats.
            let d = unsafe { _mm512_loadu_ps(b.d.as_ptr()) };
            unrolled!(r < R => {
                let a = &ops.acts[r][k];
                // Two chains of four: integer sums, so their order changes no bit.
                let mut lo = _mm512_set1_epi32(-16 * ops.ysums[r][k]);
                let mut hi = _mm512_setzero_si512();
                unrolled!(j < 4 => {
                    lo = _mm512_dpbusd_epi32(lo, q[j], _mm512_set1_epi32(quad(a, j)));
                    hi = _mm512_dpbusd_epi32(hi, q[j + 4], _mm512_set1_epi32(quad(a, j + 4)));
                });
                let dot = _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi));
                let scale = _mm512_mul_ps(d, _mm512_set1_ps(a.d));
                acc[r] = _mm512_fmadd_ps(scale, dot, acc[r]);
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

/// AVX2: the same per lane, eight rows to a register (`maddubs` + `madd` for `vpdpbusd`:
/// `q < 32` and `|y| ≤ 127` never saturate).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn gemv_q8_avx2<const R: usize>(
    ops: &Operands<'_, R>,
    rows: Range<usize>,
    out: &mut [f32],
) {
    const { assert!(R <= 8, "`unrolled!` covers tiles up to 8 rows") };
    let bpr = ops.blocks_per_row;
    let (m4, high, ones) = (
        _mm256_set1_epi8(0x0F),
        _mm256_set1_epi8(0x10),
        _mm256_set1_epi16(1),
    );
    let mut g = rows.start / GROUP;
    while g * GROUP < rows.end {
        let blocks = &ops.w[g * bpr..][..bpr];
        let mut lanes = [[0f32; GROUP]; R];
        for h in 0..2 {
            let mut acc = [_mm256_setzero_ps(); R];
            for (k, b) in blocks.iter().enumerate() {
                let mut q = [_mm256_setzero_si256(); 8];
                unrolled!(c < 4 => {
                    // SAFETY: bytes `32 h ..` of a chunk are 32 readable bytes.
                    let v = unsafe { _mm256_loadu_si256(b.qs[c][32 * h..].as_ptr().cast()) };
                    q[c] = _mm256_and_si256(v, m4);
                    q[c + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                });
                unrolled!(j < 8 => {
                    let bits = bytes_from_bits((b.qh[j] >> (32 * h)) as u32);
                    q[j] = _mm256_or_si256(q[j], _mm256_and_si256(bits, high));
                });
                // SAFETY: `d[8 h ..]` is 8 readable floats.
                let d = unsafe { _mm256_loadu_ps(b.d[8 * h..].as_ptr()) };
                unrolled!(r < R => {
                    let a = &ops.acts[r][k];
                    let mut sum = _mm256_set1_epi32(-16 * ops.ysums[r][k]);
                    unrolled!(j < 8 => {
                        let p = _mm256_maddubs_epi16(q[j], _mm256_set1_epi32(quad(a, j)));
                        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
                    });
                    let scale = _mm256_mul_ps(d, _mm256_set1_ps(a.d));
                    acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sum), acc[r]);
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
