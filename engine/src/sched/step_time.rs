//! The operating point inside a replica (`serve --tpot-target`): a model of one step's time,
//! fitted online from the steps the engine measures, and the batch it allows. A sequence that
//! decodes gets one token per step, so its time per output token is the step time: a step that
//! stays within the target keeps every running stream within it. Sequences beyond the batch the
//! target allows wait (counted as waiting, which is what the autoscaler reads as demand), and
//! prefill chunks get the step time the decoding sequences leave, so time to first token is
//! budgeted against the same step. Pure: the caller passes the measured durations.
//!
//! The model is `time = a + b·sequences + c·tokens` (a: the fixed cost of a step, weights
//! read once; b: per sequence, its attention over its context and its sampling; c: per token
//! computed), fitted by exponentially weighted least squares with a little ridge so that steps
//! that all look alike (decode only: sequences = tokens) still give a usable fit. It follows
//! the machine: a slower neighbour or longer contexts raise the fit within tens of steps.

use super::batch_rate::DecodeRates;

/// Weight of the past per new step (memory of about 1 / (1 − 0.97) ≈ 33 steps).
const FORGET: f64 = 0.97;
/// Ridge on the slopes, relative to the data's scale: keeps collinear steps solvable.
const RIDGE: f64 = 1e-9;
/// Steps measured before the model is trusted.
const WARM_UP_STEPS: u32 = 8;
/// Sequences a step may hold until then: a burst that arrives before the first measurement
/// must not all start at once (sequences already running are never cut, so a first step of
/// 64 would hold 64 streams at whatever time per token that gives until they finish).
pub const WARM_UP_SEQS: usize = 4;
/// Share of the target a step is planned to take: the rest absorbs the spread of step times
/// around the fit, so the p95 of the time per token, not only its mean, stays within it.
pub const STEP_SHARE_OF_TARGET: f64 = 0.85;
/// How far past the largest batch measured the running set may grow, as a share of it (at
/// least one sequence): the fit is a straight line through the batches seen, and far beyond
/// them it guessed wrong on the CPU (fitted on 4 sequences it allowed 25 where 11 held the
/// target, and the 16 admitted meanwhile kept their slow steps until they finished, since
/// running sequences are never cut). Growing a quarter at a time, each size is measured
/// before the next, and the target's batch is reached within a few steps.
pub const GROWTH_PAST_MEASURED: f64 = 0.25;
/// Prompt tokens a step always gives waiting or prefilling requests while any wait, however
/// tight the target: time to first token must progress.
pub const MIN_PREFILL_TOKENS: usize = 16;

/// What one step may hold under the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimits {
    /// Sequences in the running set (decoding or prefilling).
    pub max_num_seqs: usize,
    /// Tokens (prefill plus decode) in the step.
    pub max_batch_tokens: usize,
}

/// The fitted step-time model.
#[derive(Debug, Clone)]
pub struct StepTimeModel {
    /// Σ w·x·xᵀ over x = (1, sequences, tokens).
    xx: [[f64; 3]; 3],
    /// Σ w·x·t.
    xt: [f64; 3],
    steps: u32,
    /// The most sequences one measured step held.
    largest_seqs: usize,
    /// Decode-only step times by size, for a backend whose cost is not a straight line.
    rates: DecodeRates,
}

impl Default for StepTimeModel {
    fn default() -> Self {
        Self {
            xx: [[0.0; 3]; 3],
            xt: [0.0; 3],
            steps: 0,
            largest_seqs: 0,
            rates: DecodeRates::default(),
        }
    }
}

impl StepTimeModel {
    /// Records one measured step.
    pub fn observe(&mut self, sequences: usize, tokens: usize, seconds: f64) {
        if sequences == 0 || !(seconds.is_finite() && seconds >= 0.0) {
            return;
        }
        let x = [1.0, sequences as f64, tokens as f64];
        for i in 0..3 {
            for j in 0..3 {
                self.xx[i][j] = FORGET * self.xx[i][j] + x[i] * x[j];
            }
            self.xt[i] = FORGET * self.xt[i] + x[i] * seconds;
        }
        self.steps = self.steps.saturating_add(1);
        self.largest_seqs = self.largest_seqs.max(sequences);
        if tokens == sequences {
            self.rates.observe(sequences, seconds, self.steps);
        }
    }

    /// The fitted `(a, b, c)`, or `None` while warming up. Slopes are never negative (a step
    /// with more work never takes less time), and the intercept never below zero.
    pub fn coefficients(&self) -> Option<[f64; 3]> {
        if self.steps < WARM_UP_STEPS {
            return None;
        }
        let mut m = self.xx;
        let scale = (m[1][1] + m[2][2]).max(1.0);
        m[1][1] += RIDGE * scale;
        m[2][2] += RIDGE * scale;
        let [a, b, c] = solve3(m, self.xt)?;
        // A negative slope is noise: refit without it (its cost folds into the others).
        let (a, b, c) = match (b < 0.0, c < 0.0) {
            (false, false) => (a, b, c),
            (true, false) => fit_one(&m, &self.xt, 2).map(|(a, c)| (a, 0.0, c))?,
            (false, true) => fit_one(&m, &self.xt, 1).map(|(a, b)| (a, b, 0.0))?,
            (true, true) => (self.xt[0] / self.xx[0][0].max(1e-12), 0.0, 0.0),
        };
        Some([a.max(0.0), b.max(0.0), c.max(0.0)])
    }

    /// Prompt tokens per recent step (tokens beyond one per sequence), weighted as the fit is.
    fn mean_prompt_tokens(&self) -> f64 {
        let weight = self.xx[0][0];
        if weight <= 0.0 {
            return 0.0;
        }
        ((self.xx[0][2] - self.xx[0][1]) / weight).max(0.0)
    }

    /// The predicted time of a step of `sequences` holding `tokens`.
    pub fn predict(&self, sequences: usize, tokens: usize) -> Option<f64> {
        let [a, b, c] = self.coefficients()?;
        Some(a + b * sequences as f64 + c * tokens as f64)
    }

    /// The step limits that keep a step within `STEP_SHARE_OF_TARGET` of `target_s` with
    /// `running` sequences in the running set (one decode token each), never above
    /// `ceiling` nor more than `GROWTH_PAST_MEASURED` past the largest batch measured; while
    /// warming up, `WARM_UP_SEQS` sequences.
    pub fn limits(&self, target_s: f64, running: usize, ceiling: StepLimits) -> StepLimits {
        let Some([a, b, c]) = self.coefficients() else {
            return StepLimits {
                max_num_seqs: WARM_UP_SEQS.min(ceiling.max_num_seqs),
                ..ceiling
            };
        };
        let step_s = STEP_SHARE_OF_TARGET * target_s;
        let per_decoder = b + c;
        // The minimal prefill chunk a step gives whoever waits, whatever the plan, is time the
        // decoders do not get, as far as the steps carry one (on the CPU, a 16-token chunk
        // beside 22 decoders made a step planned at 60 ms take 90). Prompt tokens past it come
        // out of what the decoders leave, within the plan already.
        let prompt_tokens = self.mean_prompt_tokens().min(MIN_PREFILL_TOKENS as f64);
        let fixed_s = a + c * prompt_tokens;
        // The most decoding sequences whose step fits.
        let seqs = if fixed_s + per_decoder >= step_s {
            // Not even one sequence fits: serve one at a time, the best there is.
            1.0
        } else if per_decoder > 0.0 {
            ((step_s - fixed_s) / per_decoder).floor()
        } else {
            f64::INFINITY
        };
        // Never below the warm-up's batch: after a warm-up of one stream (a health probe, a
        // first request) the largest batch measured is 1, and growing from there held a
        // 64-stream burst's first steps at 2, 3, 4 sequences where 4 are allowed unmeasured.
        let largest = self.largest_seqs as f64;
        let measured_reach = (largest * (1.0 + GROWTH_PAST_MEASURED))
            .floor()
            .max(largest + 1.0)
            .max(WARM_UP_SEQS as f64);
        let max_num_seqs =
            (seqs.min(measured_reach).min(ceiling.max_num_seqs as f64) as usize).max(1);
        let predicted_s = a + per_decoder * max_num_seqs as f64;
        let max_num_seqs = self
            .rates
            .best_within(max_num_seqs, predicted_s, self.steps);
        // The prompt tokens the decoders leave room for (one more sequence's cost included),
        // at least a minimal chunk.
        let decoders = running.min(max_num_seqs);
        let left_s = step_s - a - per_decoder * decoders as f64 - b;
        let prefill = if c > 0.0 {
            (left_s / c).floor().max(0.0)
        } else {
            f64::INFINITY
        };
        let prefill =
            (prefill.min(ceiling.max_batch_tokens as f64) as usize).max(MIN_PREFILL_TOKENS);
        let max_batch_tokens = (decoders + prefill).min(ceiling.max_batch_tokens).max(1);
        // `RUST_LOG=tokenscale_engine::sched=trace` shows the fit and the limits per step.
        tracing::trace!(
            a,
            b,
            c,
            prompt_tokens,
            running,
            max_num_seqs,
            max_batch_tokens
        );
        StepLimits {
            max_num_seqs,
            max_batch_tokens,
        }
    }
}

/// Least squares on the intercept and feature `k` alone (the other slope taken as 0).
fn fit_one(m: &[[f64; 3]; 3], r: &[f64; 3], k: usize) -> Option<(f64, f64)> {
    let det = m[0][0] * m[k][k] - m[0][k] * m[k][0];
    if det.abs() < 1e-18 {
        return None;
    }
    let a = (r[0] * m[k][k] - m[0][k] * r[k]) / det;
    let slope = (m[0][0] * r[k] - m[k][0] * r[0]) / det;
    if slope < 0.0 {
        return Some((r[0] / m[0][0].max(1e-12), 0.0));
    }
    Some((a, slope))
}

/// Solves the 3×3 system `m·x = r` by Gaussian elimination with partial pivoting.
fn solve3(mut m: [[f64; 3]; 3], mut r: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() < 1e-18 {
            return None;
        }
        m.swap(col, pivot);
        r.swap(col, pivot);
        let (pivot_row, pivot_r) = (m[col], r[col]);
        for row in col + 1..3 {
            let f = m[row][col] / pivot_row[col];
            for (cell, &above) in m[row].iter_mut().zip(&pivot_row).skip(col) {
                *cell -= f * above;
            }
            r[row] -= f * pivot_r;
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| m[row][k] * x[k]).sum();
        x[row] = (r[row] - tail) / m[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CEILING: StepLimits = StepLimits {
        max_num_seqs: 256,
        max_batch_tokens: 2048,
    };

    /// The step time of a machine that takes 10 ms + 1 ms per sequence + 0.05 ms per token.
    fn time(s: usize, t: usize) -> f64 {
        0.010 + 0.001 * s as f64 + 0.000_05 * t as f64
    }

    /// A model that measured `steps` (sequences, tokens) of that machine.
    fn measured(steps: &[(usize, usize)]) -> StepTimeModel {
        let mut model = StepTimeModel::default();
        for &(s, t) in steps {
            model.observe(s, t, time(s, t));
        }
        model
    }

    /// The model over steps of every kind on that machine.
    fn fitted() -> StepTimeModel {
        measured(&[
            (1, 1),
            (4, 4),
            (8, 8),
            (8, 200),
            (16, 16),
            (2, 512),
            (32, 32),
            (12, 300),
        ])
    }

    #[test]
    fn the_fit_recovers_the_machine() {
        let [a, b, c] = fitted().coefficients().expect("warm");
        assert!((a - 0.010).abs() < 1e-4, "{a}");
        assert!((b - 0.001).abs() < 1e-5, "{b}");
        assert!((c - 0.000_05).abs() < 1e-6, "{c}");
    }

    #[test]
    fn a_few_sequences_start_while_warming_up() {
        let mut model = StepTimeModel::default();
        model.observe(4, 4, 0.02);
        let limits = model.limits(0.05, 4, CEILING);
        assert_eq!(limits.max_num_seqs, WARM_UP_SEQS);
        assert_eq!(limits.max_batch_tokens, CEILING.max_batch_tokens);
    }

    #[test]
    fn the_batch_the_target_allows() {
        let model = fitted();
        // 50 ms target, 42.5 ms planned, less the minimal prefill chunk as far as the steps
        // carried one (0.05 ms a token): as many decoders as fit in the rest, 1.05 ms each.
        let prompts_s = 0.000_05 * model.mean_prompt_tokens().min(MIN_PREFILL_TOKENS as f64);
        let n = model.limits(0.050, 0, CEILING).max_num_seqs;
        assert!(model.predict(n, n).expect("warm") + prompts_s <= 0.0425);
        assert!(model.predict(n + 1, n + 1).expect("warm") + prompts_s > 0.0425);
        // With 20 decoding, the prefill gets what they leave: (42.5 − 10 − 21 − 1) / 0.05.
        let limits = model.limits(0.050, 20, CEILING);
        assert!((229..=230).contains(&limits.max_batch_tokens), "{limits:?}");
        // Full (a target that only one sequence fits): still a minimal chunk for the first
        // token of whoever waits.
        let limits = model.limits(0.015, 40, CEILING);
        assert_eq!(limits.max_num_seqs, 1);
        assert_eq!(limits.max_batch_tokens, 1 + MIN_PREFILL_TOKENS);
        // A loose target: a quarter past the 32 measured, and never past the ceiling.
        assert_eq!(model.limits(10.0, 0, CEILING).max_num_seqs, 40);
        let low = StepLimits {
            max_num_seqs: 16,
            ..CEILING
        };
        assert_eq!(model.limits(10.0, 0, low), low);
    }

    #[test]
    fn the_batch_grows_a_quarter_past_the_largest_measured() {
        // Measured on 4 sequences only: the line through them allows 30, the model 5.
        let mut model = measured(&[
            (1, 1),
            (2, 32),
            (4, 4),
            (3, 64),
            (4, 4),
            (1, 16),
            (4, 4),
            (2, 2),
        ]);
        assert_eq!(model.limits(0.050, 4, CEILING).max_num_seqs, 5);
        // Each size measured lets the next grow: 5, 6, 7, 8, 10, 12, ... up to the fit's 30.
        let mut sizes = Vec::new();
        while sizes.last() != Some(&30) && sizes.len() < 20 {
            let limit = model.limits(0.050, 0, CEILING).max_num_seqs;
            model.observe(limit, limit, time(limit, limit));
            sizes.push(limit);
        }
        assert_eq!(sizes, [5, 6, 7, 8, 10, 12, 15, 18, 22, 27, 30]);
    }

    #[test]
    fn the_prompt_tokens_steps_carry_take_their_time_from_the_decoders() {
        // 10 ms + 2 ms per token; 51 ms planned. Decoding only, 20 decoders fit; when each
        // step also carries 10 prompt tokens (20 ms), 10 do.
        let time = |t: usize| 0.010 + 0.002 * t as f64;
        let limit = |prompt: usize| {
            let mut model = StepTimeModel::default();
            for s in [4, 8, 12, 16, 20, 12, 8, 4, 16, 20] {
                model.observe(s, s + prompt, time(s + prompt));
            }
            model
                .limits(0.051 / STEP_SHARE_OF_TARGET, 0, CEILING)
                .max_num_seqs
        };
        assert_eq!(limit(0), 20);
        assert_eq!(limit(10), 10);
    }

    #[test]
    fn decode_only_steps_still_give_a_usable_fit() {
        // Sequences = tokens in every step: only b + c is identified.
        let mut model = StepTimeModel::default();
        for n in [1, 2, 4, 8, 16, 8, 4, 2, 1, 32] {
            model.observe(n, n, 0.005 + 0.002 * n as f64);
        }
        let predicted = model.predict(20, 20).expect("warm");
        assert!((predicted - 0.045).abs() < 1e-4, "{predicted}");
        assert_eq!(model.limits(0.050, 0, CEILING).max_num_seqs, 18);
    }

    #[test]
    fn noise_never_gives_a_negative_slope_or_a_bad_number() {
        let mut model = StepTimeModel::default();
        for i in 0..50 {
            // The same batch, jittering time: the slopes are unidentified.
            model.observe(4, 4, 0.02 + 0.001 * f64::from(i % 3));
            model.observe(4, 4, f64::NAN);
        }
        let [a, b, c] = model.coefficients().expect("warm");
        assert!(a >= 0.0 && b >= 0.0 && c >= 0.0 && (a + 4.0 * (b + c) - 0.021).abs() < 2e-3);
        let limits = model.limits(0.001, 4, CEILING);
        assert_eq!(
            limits.max_num_seqs, 1,
            "an impossible target still serves one"
        );
    }
}

#[cfg(test)]
#[path = "step_time_replay.rs"]
mod replay;
