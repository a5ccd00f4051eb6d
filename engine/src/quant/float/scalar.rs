//! Portable kernels for f32 / f16 / bf16 rows: widen, then multiply-add in a fixed order.

use half::{bf16, f16};

use crate::gguf::GgmlType;

/// Element `k` of a row of `ty` as f32.
#[inline]
fn at(ty: GgmlType, w: &[u8], k: usize) -> f32 {
    match ty {
        GgmlType::F32 => f32::from_le_bytes([w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]]),
        GgmlType::F16 => f16::from_le_bytes([w[2 * k], w[2 * k + 1]]).to_f32(),
        _ => bf16::from_le_bytes([w[2 * k], w[2 * k + 1]]).to_f32(),
    }
}

/// `out = w` widened to f32 (`out.len()` elements).
pub(super) fn widen(ty: GgmlType, w: &[u8], out: &mut [f32]) {
    for (k, o) in out.iter_mut().enumerate() {
        *o = at(ty, w, k);
    }
}

/// `out[r] = Σ_k w[k] · xs[r][k]`.
pub(super) fn dots(ty: GgmlType, w: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    for (o, x) in out.iter_mut().zip(xs) {
        // Eight running sums (as the vector kernel keeps lanes), added in a fixed order.
        let mut lanes = [0f32; 8];
        for (k, &xk) in x.iter().enumerate() {
            lanes[k % 8] += at(ty, w, k) * xk;
        }
        *o = lanes.iter().sum();
    }
}
