//! Host references (f64) for each kernel, and the relative error the checks report. Written
//! for clarity, not speed: each is the textbook formula the kernel must reproduce.

/// ‖got − want‖₂ / ‖want‖₂ (0 when both are zero).
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "compared buffers differ in length");
    let diff: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// RMSNorm with the residual add: returns (new residual, normalised output).
pub fn rmsnorm(residual: &[f32], delta: &[f32], weight: &[f32], eps: f64) -> (Vec<f64>, Vec<f64>) {
    let h = weight.len();
    let mut res = Vec::with_capacity(residual.len());
    let mut out = Vec::with_capacity(residual.len());
    for (row, drow) in residual.chunks(h).zip(delta.chunks(h)) {
        let x: Vec<f64> = row
            .iter()
            .zip(drow)
            .map(|(&a, &b)| a as f64 + b as f64)
            .collect();
        let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / h as f64 + eps).sqrt();
        out.extend(x.iter().zip(weight).map(|(v, &w)| v * inv * w as f64));
        res.extend(x);
    }
    (res, out)
}

/// One q or k head put in position, as `qkv_position` does: `bias` added, RMS-normalised with
/// `norm` (when given), then rotated at `pos` by the frequencies `inv_freq` with cos and sin
/// scaled by `scale`: adjacent pairs `(2i, 2i+1)` or half-split `(i, i+d/2)`.
pub fn position_head(
    x: &[f32],
    bias: Option<&[f32]>,
    norm: Option<(&[f32], f64)>,
    pos: usize,
    inv_freq: &[f64],
    scale: f64,
    adjacent: bool,
) -> Vec<f64> {
    let d = x.len();
    let mut v: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(i, &a)| a as f64 + bias.map_or(0.0, |b| b[i] as f64))
        .collect();
    if let Some((w, eps)) = norm {
        let inv = 1.0 / (v.iter().map(|a| a * a).sum::<f64>() / d as f64 + eps).sqrt();
        for (a, &wi) in v.iter_mut().zip(w) {
            *a *= inv * wi as f64;
        }
    }
    let mut out = v.clone();
    for (i, &f) in inv_freq.iter().enumerate().take(d / 2) {
        let (s, c) = (pos as f64 * f).sin_cos();
        let (s, c) = (s * scale, c * scale);
        let (a, b) = if adjacent {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + d / 2)
        };
        out[a] = v[a] * c - v[b] * s;
        out[b] = v[a] * s + v[b] * c;
    }
    out
}

/// Softmax attention of one query over `keys`/`values` (`[n][d]` each), scaled by `scale`.
pub fn attend(q: &[f32], keys: &[Vec<f32>], values: &[Vec<f32>], scale: f64) -> Vec<f64> {
    let scores: Vec<f64> = keys
        .iter()
        .map(|k| {
            k.iter()
                .zip(q)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>()
                * scale
        })
        .collect();
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut out = vec![0.0; q.len()];
    for (w, v) in weights.iter().zip(values) {
        for (o, &x) in out.iter_mut().zip(v) {
            *o += w / total * x as f64;
        }
    }
    out
}

/// `silu(gate) * up` per row of `[gate | up]`.
pub fn silu_mul(gate_up: &[f32], ffn: usize) -> Vec<f64> {
    gate_up
        .chunks(2 * ffn)
        .flat_map(|row| {
            (0..ffn).map(move |j| {
                let (g, u) = (row[j] as f64, row[ffn + j] as f64);
                g / (1.0 + (-g).exp()) * u
            })
        })
        .collect()
}

/// `y[rows, out] = x[rows, in] · w[out, in]ᵀ`.
pub fn linear(x: &[f32], w: &[f32], in_dim: usize) -> Vec<f64> {
    x.chunks(in_dim)
        .flat_map(|xr| {
            w.chunks(in_dim)
                .map(move |wr| xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum())
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn relative_error_is_a_norm_ratio() {
        assert_eq!(rel_err(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_err(&[3.0, 4.0], &[0.0, 0.0]) - 5.0).abs() < 1e-12);
        assert!((rel_err(&[1.1, 0.0], &[1.0, 0.0]) - 0.1).abs() < 1e-6);
    }

    #[test]
    fn rmsnorm_output_has_unit_rms_before_the_weight() {
        let (res, out) = rmsnorm(&[1.0, 2.0, 3.0, 4.0], &[1.0, 0.0, 0.0, 0.0], &[1.0; 4], 0.0);
        assert_eq!(res, [2.0, 2.0, 3.0, 4.0]);
        let rms = (out.iter().map(|v| v * v).sum::<f64>() / 4.0).sqrt();
        assert!((rms - 1.0).abs() < 1e-12);
    }

    /// Plain RoPE's frequencies for a head of 8.
    fn plain(base: f64) -> Vec<f64> {
        (0..4).map(|i| base.powf(-2.0 * i as f64 / 8.0)).collect()
    }

    #[test]
    fn rope_preserves_norm_and_position_zero_is_identity() {
        let x = [0.3f32, -1.2, 0.7, 2.0, -0.1, 0.5, 1.5, -0.9];
        let f = plain(10000.0);
        let rope = |pos, adjacent| position_head(&x, None, None, pos, &f, 1.0, adjacent);
        for adjacent in [true, false] {
            let at0 = rope(0, adjacent);
            assert!(
                at0.iter()
                    .zip(&x)
                    .all(|(a, &b)| (a - b as f64).abs() < 1e-12)
            );
            let rotated = rope(1234, adjacent);
            let n = |v: &[f64]| v.iter().map(|a| a * a).sum::<f64>();
            assert!((n(&rotated) - n(&at0)).abs() < 1e-9);
        }
        // Adjacent rotates (x0, x1) together; half-split rotates (x0, x4).
        let adj = rope(1, true);
        assert!((adj[0] - (0.3 * 1f64.cos() + 1.2 * 1f64.sin())).abs() < 1e-6);
        let half = rope(1, false);
        assert!((half[0] - (0.3 * 1f64.cos() + 0.1 * 1f64.sin())).abs() < 1e-6);
    }

    #[test]
    fn position_adds_the_bias_normalises_then_rotates_with_the_scale() {
        let x = [1.0f32, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0];
        let bias = [1.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let w = [1.0f32; 8];
        let out = position_head(
            &x,
            Some(&bias),
            Some((&w, 0.0)),
            0,
            &plain(10.0),
            2.0,
            false,
        );
        // (2, 2, 3, 4, 0…) has RMS sqrt(33 / 8); position 0 leaves it, the scale doubles it.
        let rms = (33.0f64 / 8.0).sqrt();
        assert!(
            (out[0] - 2.0 * 2.0 / rms).abs() < 1e-12 && (out[3] - 2.0 * 4.0 / rms).abs() < 1e-12
        );
    }

    #[test]
    fn attention_of_identical_keys_averages_values() {
        let keys = vec![vec![1.0, 0.0]; 2];
        let values = vec![vec![2.0, 0.0], vec![0.0, 4.0]];
        assert_eq!(attend(&[1.0, 1.0], &keys, &values, 1.0), [1.0, 2.0]);
    }

    #[test]
    fn silu_mul_and_linear_follow_their_formulas() {
        let out = silu_mul(&[0.0, 1.0, 2.0, 3.0], 2);
        assert!(
            (out[0] - 0.0).abs() < 1e-12 && (out[1] - 3.0 / (1.0 + (-1f64).exp())).abs() < 1e-12
        );
        assert_eq!(linear(&[1.0, 2.0], &[3.0, 4.0, 5.0, 6.0], 2), [11.0, 17.0]);
    }
}
