//! The device sampler's per-row procedure (`apply_logit_edits` and `sample_rows` in
//! `kernels/sampling.cu`) transcribed to Rust as the kernel executes it: 1024 threads striding
//! the row, block-wide sums in the kernel's order (warp butterflies, then warps in order),
//! bisections on weight bits and ids, the segmented inverse CDF. Its tests hold it to the host
//! sampler on given logits: the CPU-side pin of the device sampler's semantics. It is also the
//! reference a stand-in backend samples with in the engine's device-sampling test.

use crate::sampling::TokenLogprob;
use crate::sampling::spec::{self, Edit, RowSampling};

/// Threads per row (`SPEC_THREADS`).
pub const THREADS: usize = 1024;
const WARP: usize = 32;

/// `apply_logit_edits` on one row.
pub fn apply_edits(row: &mut [f32], edits: &[Edit]) {
    let vocab = row.len();
    for e in edits.iter().filter(|e| (e.id as usize) < vocab) {
        row[e.id as usize] = spec::apply_edit(row[e.id as usize], e);
    }
}

/// `block_sum_d`: each warp's butterfly (lane 0's value), then the warps in order.
fn block_sum(per_thread: &[f64]) -> f64 {
    let mut total = 0.0;
    for warp in per_thread.chunks(WARP) {
        let mut lanes = warp.to_vec();
        let mut o = WARP / 2;
        while o > 0 {
            let before = lanes.clone();
            for (lane, v) in lanes.iter_mut().enumerate() {
                *v += before[lane ^ o];
            }
            o /= 2;
        }
        total += lanes[0];
    }
    total
}

/// `Cut` and `keeps`.
fn keeps(c: spec::Cut, w: f32, id: usize) -> bool {
    c.keeps(id, w)
}

fn passes(w: f32, x: f32, strict: bool) -> bool {
    if strict { w > x } else { w >= x }
}

fn kept_count(w: &[f32], c: spec::Cut, x: f32, strict: bool) -> usize {
    let ids = 0..w.len();
    ids.filter(|&i| keeps(c, w[i], i) && passes(w[i], x, strict))
        .count()
}

/// `kept_mass`: thread `t` sums ids `t, t + THREADS, …`.
fn kept_mass(w: &[f32], c: spec::Cut, x: f32, strict: bool) -> f64 {
    let mut per_thread = vec![0.0f64; THREADS];
    for (t, sum) in per_thread.iter_mut().enumerate() {
        for i in (t..w.len()).step_by(THREADS) {
            if keeps(c, w[i], i) && passes(w[i], x, strict) {
                *sum += f64::from(w[i]);
            }
        }
    }
    block_sum(&per_thread)
}

/// `tie_cut`: the lowest id `c` with `need` kept tokens of weight `x` at ids `<= c`.
fn tie_cut(w: &[f32], c: spec::Cut, x: f32, need: usize) -> i64 {
    let (mut lo, mut hi) = (-1i64, w.len() as i64 - 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let n = (0..=mid as usize)
            .filter(|&i| keeps(c, w[i], i) && w[i] == x)
            .count();
        if n >= need {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// `rank_cut`: bisection on weight bits for the largest weight whose kept tokens at or
/// above it number at least `k` (or weigh at least `goal`).
fn rank_cut(w: &[f32], c: spec::Cut, mut lo: u32, mut hi: u32, goal: Goal) -> f32 {
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let x = f32::from_bits(mid);
        let enough = match goal {
            Goal::Count(k) => kept_count(w, c, x, false) >= k,
            Goal::Mass(m) => kept_mass(w, c, x, false) >= m,
        };
        if enough {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    f32::from_bits(lo)
}

#[derive(Clone, Copy)]
enum Goal {
    Count(usize),
    Mass(f64),
}

/// `draw_in_id_order`: contiguous segments per thread, an exclusive scan of their sums, the
/// walk inside the segment holding the target; the highest kept id past the end.
fn draw_in_id_order(w: &[f32], c: spec::Cut, target: f64) -> i32 {
    let seg = w.len().div_ceil(THREADS);
    let segment = |t: usize| (t * seg).min(w.len())..((t + 1) * seg).min(w.len());
    let kept = |t: usize| segment(t).filter(|&i| keeps(c, w[i], i));
    let sums: Vec<f64> = (0..THREADS)
        .map(|t| kept(t).map(|i| f64::from(w[i])).sum())
        .collect();
    let highest = (0..THREADS).filter_map(|t| kept(t).next_back()).max();
    let mut chosen = None;
    let mut run = 0.0;
    for (t, &local) in sums.iter().enumerate() {
        let start = run;
        run += local;
        if chosen.is_some() || !(local > 0.0 && start <= target && target < start + local) {
            continue;
        }
        let mut acc = start;
        chosen = kept(t).find(|&i| {
            acc += f64::from(w[i]);
            acc > target
        });
    }
    chosen.or(highest).map_or(-1, |i| i as i32)
}

/// `sample_rows` on one row (edited and masked): the token, or −1 without a finite logit.
pub fn sample_row(logits: &[f32], s: &RowSampling) -> i32 {
    let (mut best, mut max) = (i32::MAX, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > max {
            (best, max) = (i as i32, l);
        }
    }
    if s.inv_t == 0.0 {
        return if max > f32::NEG_INFINITY { best } else { -1 };
    }
    if !max.is_finite() {
        return -1;
    }
    let w: Vec<f32> = logits
        .iter()
        .map(|&l| spec::weight(l, max, s.inv_t, s.min_weight))
        .collect();
    let mut cut = spec::Cut::ALL;
    let k = s.top_k.min(i32::MAX as u32) as usize;
    if k > 0 && k < kept_count(&w, cut, 0.0, true) {
        let wk = rank_cut(&w, cut, 1, 0x7f80_0000, Goal::Count(k));
        let need = k - kept_count(&w, cut, wk, true);
        cut = spec::Cut {
            weight: wk,
            id: tie_cut(&w, cut, wk, need),
        };
    }
    let mut mass = kept_mass(&w, cut, 0.0, false);
    if s.top_p < 1.0 {
        let goal = f64::from(s.top_p) * mass;
        let wp = rank_cut(&w, cut, 0, 0x7f80_0000, Goal::Mass(goal));
        let mut run = kept_mass(&w, cut, wp, true);
        let ties = kept_count(&w, cut, wp, false) - kept_count(&w, cut, wp, true);
        let mut j = 0;
        while j < ties {
            run += f64::from(wp);
            j += 1;
            if run >= goal {
                break;
            }
        }
        cut = spec::Cut {
            weight: wp,
            id: tie_cut(&w, cut, wp, j),
        };
        mass = kept_mass(&w, cut, 0.0, false);
    }
    draw_in_id_order(&w, cut, s.uniform * mass)
}

/// `row_logprobs` on one raw row: the chosen token's logprob and the `n` most likely
/// (value descending, lower id first on a tie, NaN never), under `max + ln Σ e^(l − max)`.
pub fn row_logprobs(raw: &[f32], token: i32, n: usize) -> (f32, Vec<TokenLogprob>) {
    let max = raw
        .iter()
        .fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m });
    let lse = if max.is_finite() {
        let sum: f64 = raw
            .iter()
            .filter(|l| !l.is_nan())
            .map(|&l| f64::from((l - max).exp()))
            .sum();
        max + sum.ln() as f32
    } else {
        max
    };
    let chosen = usize::try_from(token)
        .ok()
        .and_then(|t| raw.get(t))
        .map_or(f32::NEG_INFINITY, |l| l - lse);
    let mut ranked: Vec<(usize, f32)> = raw
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, l)| !l.is_nan())
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let top = ranked.into_iter().take(n.min(MAX_TOP));
    let top = top.map(|(id, l)| TokenLogprob {
        token_id: id as u32,
        logprob: l - lse,
    });
    (chosen, top.collect())
}

/// Most alternatives per row (`MAX_TOP_LOGPROBS`).
const MAX_TOP: usize = crate::sampling::MAX_TOP_LOGPROBS as usize;

#[cfg(test)]
#[path = "sample_model_tests.rs"]
mod tests;
