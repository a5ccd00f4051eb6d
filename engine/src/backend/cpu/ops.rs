//! Element-wise and per-row operations of the forward pass (f32).

use crate::model::RopeLayout;

/// `out[t] = x[t] / rms(x[t]) * weight` for each `[hidden]` row.
pub(super) fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let hidden = weight.len();
    for (xr, or) in x.chunks_exact(hidden).zip(out.chunks_exact_mut(hidden)) {
        let mean_sq = xr.iter().map(|v| v * v).sum::<f32>() / hidden as f32;
        let scale = 1.0 / (mean_sq + eps).sqrt();
        for ((o, v), w) in or.iter_mut().zip(xr).zip(weight) {
            *o = v * scale * w;
        }
    }
}

/// `x += y`.
pub(super) fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// SwiGLU: `out[t, j] = silu(gate_up[t, j]) * gate_up[t, ffn + j]` for rows of `[2 * ffn]`
/// (with the vectorisable `exp`: libm's is a call per element, a few percent of a step).
pub(super) fn swiglu(gate_up: &[f32], ffn: usize, out: &mut [f32]) {
    for (gu, o) in gate_up.chunks_exact(2 * ffn).zip(out.chunks_exact_mut(ffn)) {
        let (gate, up) = gu.split_at(ffn);
        for ((o, &g), &u) in o.iter_mut().zip(gate).zip(up) {
            *o = g / (1.0 + crate::sampling::exp(-g)) * u;
        }
    }
}

/// Cos/sin tables for RoPE: `[tokens, inv_freqs.len()]` each, for the given positions, both
/// multiplied by `scale` (YaRN's attention factor; 1 otherwise).
pub(super) fn rope_tables(
    positions: &[usize],
    inv_freqs: &[f64],
    scale: f64,
) -> (Vec<f32>, Vec<f32>) {
    let half = inv_freqs.len();
    let (mut cos, mut sin) = (Vec::with_capacity(positions.len() * half), Vec::new());
    sin.reserve(positions.len() * half);
    for &pos in positions {
        for &inv_freq in inv_freqs {
            // The angle in f64: pos · inv_freq loses digits in f32 at long positions.
            let angle = pos as f64 * inv_freq;
            cos.push((angle.cos() * scale) as f32);
            sin.push((angle.sin() * scale) as f32);
        }
    }
    (cos, sin)
}

/// RMSNorm of each `[head_dim]` head of `x` in place, with one weight vector for all heads
/// (Qwen3's q/k norm).
pub(super) fn rms_norm_heads(x: &mut [f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    for head in x.chunks_exact_mut(d) {
        let mean_sq = head.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let scale = 1.0 / (mean_sq + eps).sqrt();
        for (v, w) in head.iter_mut().zip(weight) {
            *v = *v * scale * w;
        }
    }
}

/// Rotates each `[head_dim]` head of one token's `x` (`[heads, head_dim]`) by its position.
pub(super) fn rope(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = match layout {
                RopeLayout::Adjacent => (2 * i, 2 * i + 1),
                RopeLayout::HalfSplit => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos[i] - x1 * sin[i];
            head[b] = x0 * sin[i] + x1 * cos[i];
        }
    }
}
