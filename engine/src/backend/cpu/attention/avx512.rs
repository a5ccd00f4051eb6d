//! The value pass on 512-bit vectors: each slot's value row is widened from f16 straight into
//! registers and serves every query head of the group (up to four at a time), so a slot costs
//! one load and convert per 16 dimensions and one FMA per head, where the AVX2 pass widens the
//! block into scratch and reloads it per head at 8 dimensions an FMA.
//!
//! Every output element still sees `acc = fma(w_s, v_s, acc)` for the slots in order, from the
//! same f32 values, so the result is the AVX2 pass's to the bit.

use std::arch::x86_64::*;

use crate::backend::cpu::kv_store::F16Bits;

/// `out_g[h, ..] += Σ_s weights(h)[s] · values[s, ..]` for one block (`values`: `[n, hd]`),
/// `weights(h)` being `scores[h * ctx + at ..][..n]`.
///
/// # Safety
/// The CPU must support AVX-512 F; `hd` must be a multiple of 16.
#[target_feature(enable = "avx512f,fma,f16c")]
pub(super) unsafe fn accumulate_block(
    scores: &[f32],
    ctx: usize,
    at: usize,
    values: &[F16Bits],
    hd: usize,
    out_g: &mut [f32],
) {
    let group = out_g.len() / hd;
    let n = values.len() / hd;
    assert!(hd.is_multiple_of(16) && scores.len() >= (group - 1) * ctx + at + n);
    for h0 in (0..group).step_by(4) {
        let heads = (group - h0).min(4);
        let mut d0 = 0;
        while d0 < hd {
            let at_h0 = Place {
                ctx,
                at,
                n,
                hd,
                d0,
                h0,
            };
            if hd - d0 >= 64 {
                match heads {
                    1 => heads_block::<1, 4>(scores, values, out_g, at_h0),
                    2 => heads_block::<2, 4>(scores, values, out_g, at_h0),
                    3 => heads_block::<3, 4>(scores, values, out_g, at_h0),
                    _ => heads_block::<4, 4>(scores, values, out_g, at_h0),
                }
                d0 += 64;
            } else {
                match heads {
                    1 => heads_block::<1, 1>(scores, values, out_g, at_h0),
                    2 => heads_block::<2, 1>(scores, values, out_g, at_h0),
                    3 => heads_block::<3, 1>(scores, values, out_g, at_h0),
                    _ => heads_block::<4, 1>(scores, values, out_g, at_h0),
                }
                d0 += 16;
            }
        }
    }
}

/// Which part of a block [`heads_block`] covers.
#[derive(Clone, Copy)]
struct Place {
    ctx: usize,
    /// The block's first slot in each head's scores.
    at: usize,
    /// Slots in the block.
    n: usize,
    hd: usize,
    /// First dimension.
    d0: usize,
    /// First head.
    h0: usize,
}

/// Heads `h0 .. h0 + G`, dimensions `d0 .. d0 + 16 V`, in `G · V` registers.
#[target_feature(enable = "avx512f,fma,f16c")]
fn heads_block<const G: usize, const V: usize>(
    scores: &[f32],
    values: &[F16Bits],
    out_g: &mut [f32],
    p: Place,
) {
    let Place {
        ctx,
        at,
        n,
        hd,
        d0,
        h0,
    } = p;
    assert!(d0 + 16 * V <= hd && values.len() >= n * hd && out_g.len() >= (h0 + G) * hd);
    let weights: [&[f32]; G] = std::array::from_fn(|h| &scores[(h0 + h) * ctx + at..][..n]);
    // SAFETY (all loads and stores below): head `h0 + h < out_g.len() / hd` holds `hd ≥ d0 +
    // 16 V` floats, and slot `s < n` of `values` holds `hd` halves (asserted above);
    // unaligned accesses.
    let mut acc: [[__m512; V]; G] = std::array::from_fn(|h| {
        std::array::from_fn(|c| unsafe {
            _mm512_loadu_ps(out_g.as_ptr().add((h0 + h) * hd + d0 + 16 * c))
        })
    });
    for s in 0..n {
        let row = unsafe { values.as_ptr().add(s * hd + d0) };
        let v: [__m512; V] = std::array::from_fn(|c| unsafe {
            _mm512_cvtph_ps(_mm256_loadu_si256(row.add(16 * c).cast()))
        });
        for (acc_h, w) in acc.iter_mut().zip(&weights) {
            let w = _mm512_set1_ps(w[s]);
            for (a, v) in acc_h.iter_mut().zip(&v) {
                *a = _mm512_fmadd_ps(w, *v, *a);
            }
        }
    }
    for (h, acc_h) in acc.iter().enumerate() {
        for (c, a) in acc_h.iter().enumerate() {
            unsafe { _mm512_storeu_ps(out_g.as_mut_ptr().add((h0 + h) * hd + d0 + 16 * c), *a) };
        }
    }
}
