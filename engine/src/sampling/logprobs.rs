//! Log-probabilities under the model's raw distribution (log-softmax of the unprocessed logits),
//! which is what the OpenAI `logprobs` fields report.

use serde::{Deserialize, Serialize};

use super::exp::exp;

/// A token and its log-probability.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// Token id.
    pub token_id: u32,
    /// Natural-log probability (≤ 0).
    pub logprob: f32,
}

/// Token `token_id`'s logprob under `logits` (`[vocab]`) and the `n` most likely tokens: the
/// entry both a sampled token and a scored prompt token report.
pub fn logprob_entry(logits: &[f32], token_id: u32, n: u32) -> (f32, Vec<TokenLogprob>) {
    let lse = log_sum_exp(logits);
    let logprob = logits
        .get(token_id as usize)
        .map_or(f32::NEG_INFINITY, |l| l - lse);
    (logprob, top_logprobs(logits, n as usize, lse))
}

/// `ln Σ exp(l_i)`, computed stably; NaN logits count as impossible.
pub fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = super::weights::max_logit(logits);
    if !max.is_finite() {
        return max;
    }
    let mut block = Vec::with_capacity(super::weights::BLOCK);
    let mut sum = 0.0f64;
    for chunk in logits.chunks(super::weights::BLOCK) {
        block.clear();
        // exp(NaN - max) is NaN; `max(0.0)` turns it into 0 (f32::max ignores NaN).
        block.extend(chunk.iter().map(|&l| exp(l - max).max(0.0)));
        sum += f64::from(super::weights::sum(&block));
    }
    max + sum.ln() as f32
}

/// The `n` most likely tokens, most likely first (lower id first on a tie). One pass over the
/// vocabulary with a small sorted buffer: `n` is at most 20.
pub fn top_logprobs(logits: &[f32], n: usize, log_sum_exp: f32) -> Vec<TokenLogprob> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    if n == 0 {
        return Vec::new();
    }
    for (id, &l) in logits.iter().enumerate() {
        if l.is_nan() || (best.len() == n && l <= best[n - 1].1) {
            continue;
        }
        let at = best.partition_point(|&(_, b)| b >= l);
        best.insert(at, (id as u32, l));
        best.truncate(n);
    }
    best.into_iter()
        .map(|(token_id, l)| TokenLogprob {
            token_id,
            logprob: l - log_sum_exp,
        })
        .collect()
}
