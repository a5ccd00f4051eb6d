//! Candidate filtering for top-k and top-p without sorting the whole vocabulary: a partial
//! selection finds the head, and only the head is sorted (49k-entry sorts per step per sequence
//! would cost more than a decode step of a small model).

use std::cmp::Ordering;

/// A token still in the running, with its unnormalised probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// `exp(scaled_logit - max_scaled_logit)`: proportional to the token's probability.
    pub weight: f32,
}

/// Most likely first; the lower id first on a tie, so filtering is deterministic (the
/// specification's rank order, which the device sampler follows too).
fn by_likelihood(a: &Candidate, b: &Candidate) -> Ordering {
    super::spec::by_rank((a.id, a.weight), (b.id, b.weight))
}

/// The `k` heaviest of `weights` ([vocab]) as candidates (in no particular order), in one pass:
/// a buffer of up to `2k` is cut back to `k` whenever it fills, and anything not heavier than
/// the current `k`-th is skipped (on a tie the earlier, lower id stays).
pub fn top_k_of(weights: &[f32], k: usize, out: &mut Vec<Candidate>) {
    out.clear();
    let mut threshold = 0.0f32;
    for (id, &weight) in weights.iter().enumerate() {
        if weight > threshold {
            out.push(Candidate {
                id: id as u32,
                weight,
            });
            if out.len() >= 2 * k {
                apply_top_k(out, k);
                threshold = out.iter().map(|c| c.weight).fold(f32::INFINITY, f32::min);
            }
        }
    }
    apply_top_k(out, k);
}

/// Keeps the `k` most likely candidates (in no particular order).
pub fn apply_top_k(candidates: &mut Vec<Candidate>, k: usize) {
    if k == 0 || k >= candidates.len() {
        return;
    }
    candidates.select_nth_unstable_by(k - 1, by_likelihood);
    candidates.truncate(k);
}

/// Keeps the smallest most-likely-first prefix whose probability mass reaches `top_p` of
/// `total` (the mass before the cut, which may include light tokens not among `candidates`),
/// sorted most likely first. Tries a head of 64, then 1024, then 8192, then everything.
pub fn apply_top_p(candidates: &mut Vec<Candidate>, top_p: f32, total: f64) {
    let threshold = top_p as f64 * total;
    for head in [64, 1024, 8192, usize::MAX] {
        let head = head.min(candidates.len());
        if head == 0 {
            return;
        }
        if head < candidates.len() {
            candidates.select_nth_unstable_by(head - 1, by_likelihood);
        }
        candidates[..head].sort_unstable_by(by_likelihood);
        let mut mass = 0.0f64;
        for i in 0..head {
            mass += candidates[i].weight as f64;
            if mass >= threshold {
                candidates.truncate(i + 1);
                return;
            }
        }
    }
    // Rounding kept the mass just under the threshold: everything stays, which is correct.
}
