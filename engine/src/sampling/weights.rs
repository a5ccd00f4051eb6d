//! Softmax weights over the whole vocabulary, written as plain lane loops so the compiler
//! vectorises them, with per-block sums so a draw skips to its block instead of scanning 49k
//! entries.

/// Entries per block of `block_sums`.
pub const BLOCK: usize = 256;
const LANES: usize = 8;

/// The largest non-NaN logit (`-inf` when there is none).
pub fn max_logit(logits: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &l) in lanes.iter_mut().zip(chunk) {
            *lane = lane.max(l); // f32::max ignores a NaN operand
        }
    }
    rest.iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &l| m.max(l))
}

/// Fills `weights` ([vocab]) with `exp((l - max) / T)`, zero where that is below `min_weight`
/// (min-p) or the logit is NaN, and `block_sums` with the sum of each `BLOCK` of weights.
/// Returns the total weight.
pub fn fill(
    logits: &[f32],
    max: f32,
    inv_t: f32,
    min_weight: f32,
    weights: &mut Vec<f32>,
    block_sums: &mut Vec<f64>,
) -> f64 {
    weights.clear();
    // `!(w >= ..)` also zeroes NaN.
    weights.extend(
        logits
            .iter()
            .map(|&l| super::spec::weight(l, max, inv_t, min_weight)),
    );
    block_sums.clear();
    // f64 sums: the draw's target is `uniform · total`, and an f32 total would move it by
    // more than a flat distribution's token width, away from what the device sampler draws.
    block_sums.extend(weights.chunks(BLOCK).map(sum_f64));
    block_sums.iter().sum()
}

/// Sum of `values` in eight f64 lanes.
pub fn sum_f64(values: &[f32]) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(v);
        }
    }
    rest.iter().map(|&v| f64::from(v)).sum::<f64>() + lanes.iter().sum::<f64>()
}

/// Sum of `values` in eight lanes (vectorised).
pub fn sum(values: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += v;
        }
    }
    rest.iter().sum::<f32>() + lanes.iter().sum::<f32>()
}

/// The index whose cumulative weight first exceeds `target` (in `[0, total)`), using the block
/// sums to find the block. Falls back to the last positive weight when rounding overshoots.
pub fn pick(weights: &[f32], block_sums: &[f64], mut target: f64) -> Option<u32> {
    let mut start = 0;
    for (b, &s) in block_sums.iter().enumerate() {
        if target < s {
            start = b * BLOCK;
            break;
        }
        target -= s;
        start = (b + 1) * BLOCK;
    }
    let start = start.min(weights.len());
    for (i, &w) in weights.iter().enumerate().skip(start) {
        target -= f64::from(w);
        if w > 0.0 && target < 0.0 {
            return Some(i as u32);
        }
    }
    weights.iter().rposition(|&w| w > 0.0).map(|i| i as u32)
}
