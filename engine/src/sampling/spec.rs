//! The sampling specification both samplers follow: the host `Sampler` and the CUDA kernel
//! (`backend/cuda/kernels/sampling.cu`, mirrored step by step in `backend/cuda/sample_model.rs`).
//!
//! Per row, in this order: a grammar mask sets disallowed logits to −∞; each edited token gets
//! `rep(l + bias) − subtract` (logit bias, then the repetition penalty, then presence +
//! frequency); greedy takes the argmax (lowest id on ties, NaN never); otherwise every token
//! gets the weight `exp((l − max) · inv_t)` ([`exp`](super::exp), bit for bit on both sides),
//! zeroed below `max(min_p, f32::MIN_POSITIVE)` (min-p, relative to the most likely token);
//! top-k and top-p keep a prefix of the positive weights ranked by [`by_rank`] (weight
//! descending, lower id first), top-p measured against the mass top-k kept; the draw walks the
//! kept tokens in *ascending id* with `target = uniform · kept mass` (f64 sums) and takes the
//! first whose running sum passes it (the highest kept id if rounding runs past the end).
//! The uniform is one `Rng::next_f64` per non-greedy token, drawn on the host for both.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};

/// How one token's logit is rewritten before the draw: `rep(l + bias) − subtract`, where
/// `rep(x)` is `x / repetition` for positive `x` and `x · repetition` otherwise (1: off).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct Edit {
    pub id: u32,
    pub bias: f32,
    pub repetition: f32,
    pub subtract: f32,
}

/// The edited logit, each operation rounded on its own (the kernel uses `__f*_rn`, never a
/// fused multiply-add, so both sides round identically).
pub fn apply_edit(logit: f32, e: &Edit) -> f32 {
    let mut x = logit + e.bias;
    if e.repetition != 1.0 {
        x = if x > 0.0 {
            x / e.repetition
        } else {
            x * e.repetition
        };
    }
    x - e.subtract
}

/// What a request's penalties and bias do at this step, one edit per touched token, by id.
/// `prompt` is the set of prompt tokens (only read when the repetition penalty is on).
pub struct EditInputs<'a> {
    pub logit_bias: &'a BTreeMap<u32, f32>,
    pub repetition: f32,
    pub presence: f32,
    pub frequency: f32,
    pub prompt: &'a HashSet<u32>,
    pub output_counts: &'a HashMap<u32, u32>,
}

/// The edits of one step, sorted by token id, ids below `vocab` only.
pub fn edits(inp: &EditInputs<'_>, vocab: usize) -> Vec<Edit> {
    let mut by_id: BTreeMap<u32, Edit> = BTreeMap::new();
    let blank = |id| Edit {
        id,
        bias: 0.0,
        repetition: 1.0,
        subtract: 0.0,
    };
    for (&id, &bias) in inp.logit_bias {
        by_id.entry(id).or_insert_with(|| blank(id)).bias = bias;
    }
    if inp.repetition != 1.0 {
        for &id in inp.prompt {
            by_id.entry(id).or_insert_with(|| blank(id)).repetition = inp.repetition;
        }
    }
    let output_penalised = inp.presence != 0.0 || inp.frequency != 0.0;
    let counts = inp.output_counts.iter();
    for (&id, &count) in counts.filter(|_| inp.repetition != 1.0 || output_penalised) {
        let e = by_id.entry(id).or_insert_with(|| blank(id));
        e.repetition = inp.repetition;
        e.subtract = inp.presence + inp.frequency * count as f32;
    }
    by_id
        .into_values()
        .filter(|e| (e.id as usize) < vocab)
        .collect()
}

/// Per-row parameters of a non-masked draw, as the kernel reads them (`RowSampling` in
/// `sampling.cu`: the same `repr(C)` layout).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[repr(C)]
pub struct RowSampling {
    /// `1 / temperature`; 0 means greedy.
    pub inv_t: f32,
    /// Weights below this are dropped: `max(min_p, f32::MIN_POSITIVE)`.
    pub min_weight: f32,
    /// 0: no top-k cut.
    pub top_k: u32,
    /// 1: no top-p cut.
    pub top_p: f32,
    /// The row's uniform number in `[0, 1)`.
    pub uniform: f64,
}

/// The weight floor of min-p (weights are relative to the most likely token's).
pub fn min_weight(min_p: f32) -> f32 {
    min_p.max(f32::MIN_POSITIVE)
}

/// A token's weight: `exp((l − max) · inv_t)`, or 0 below `min_weight` (NaN included).
#[inline(always)]
pub fn weight(logit: f32, max: f32, inv_t: f32, min_weight: f32) -> f32 {
    let w = super::exp((logit - max) * inv_t);
    if w >= min_weight { w } else { 0.0 }
}

/// The rank order of top-k and top-p: heavier first, the lower id first on a tie.
pub fn by_rank(a: (u32, f32), b: (u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The last kept token of the ranked prefix: a token is kept when its weight is above
/// `weight`, or equal to it with an id at most `id`. `Cut::ALL` keeps every positive weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cut {
    pub weight: f32,
    pub id: i64,
}

impl Cut {
    pub const ALL: Cut = Cut {
        weight: 0.0,
        id: -1,
    };

    pub fn keeps(&self, id: usize, w: f32) -> bool {
        w > self.weight || (w == self.weight && (id as i64) <= self.id)
    }
}
