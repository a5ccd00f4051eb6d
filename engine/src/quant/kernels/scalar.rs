//! Portable kernels: the fallback on CPUs without AVX2, and the reference the SIMD kernels are
//! tested against.

use std::ops::Range;

use super::QBlock;
use crate::quant::blocks::{BlockQ8, QK};

/// Weight rows × f32 activations.
pub(crate) fn gemv_f32<B: QBlock, const R: usize>(
    w: &[B],
    blocks_per_row: usize,
    rows: Range<usize>,
    acts: [&[f32]; R],
    out: &mut [f32],
) {
    let n = rows.len();
    for (i, row) in rows.enumerate() {
        let wrow = &w[row * blocks_per_row..(row + 1) * blocks_per_row];
        for (r, act) in acts.iter().enumerate() {
            out[r * n + i] = wrow
                .iter()
                .zip(act.chunks_exact(QK))
                .map(|(b, x)| b.dot_f32(x))
                .sum();
        }
    }
}

/// Weight rows × quantised activations.
pub(crate) fn gemv_q8<B: QBlock, const R: usize>(
    w: &[B],
    blocks_per_row: usize,
    rows: Range<usize>,
    acts: [&[BlockQ8]; R],
    out: &mut [f32],
) {
    let n = rows.len();
    for (i, row) in rows.enumerate() {
        let wrow = &w[row * blocks_per_row..(row + 1) * blocks_per_row];
        for (r, act) in acts.iter().enumerate() {
            out[r * n + i] = wrow.iter().zip(act.iter()).map(|(b, a)| b.dot_q8(a)).sum();
        }
    }
}

/// Activations → [`BlockQ8`] (see `quant::quantize_q8`).
pub(crate) fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    for (block, xs) in out.iter_mut().zip(x.chunks_exact(QK)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in block.qs.iter_mut().zip(xs) {
            // round-half-away like ggml's roundf; |v * id| ≤ 127 so the cast cannot wrap.
            let r = (v * id).round() as i32;
            *q = r as i8;
            sum += r;
        }
        block.d = d;
        block.s = d * sum as f32;
    }
}
