//! Quantisation of activations into [`BlockQ8`] for the integer dot products.

use super::blocks::{BlockQ8, QK};

/// Quantises `x` (a multiple of 32 long) into `out` (`x.len() / 32` blocks), rounding each
/// value to the nearest of 255 levels spread over the block's absolute maximum.
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    debug_assert_eq!(x.len(), out.len() * QK);
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
