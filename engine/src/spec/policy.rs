//! How long a sequence's next draft is: its measured acceptance, and whether a verify step of
//! that length pays for itself under the engine's step-time model and the measured cost of a
//! draft row. Pure.

use super::SpeculativeMode;

/// Weight of each new accept/reject observation in the acceptance estimate.
const LEARN: f64 = 0.2;
/// The acceptance a sequence starts with: a fair chance for its first drafts.
const PRIOR: f64 = 0.6;

/// Tokens one verify step is expected to give with `k` draft tokens when each is accepted
/// with probability `alpha` given the ones before: `1 + α + … + α^k`.
pub fn expected_tokens(alpha: f64, k: usize) -> f64 {
    (0..=k).map(|i| alpha.powi(i as i32)).sum()
}

/// Most draft rows whose step time [`DraftCost`] keeps apart (more count as this many).
pub const MEASURED_ROWS: usize = 16;

/// What a step costs, from the engine's measured step-time model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCost {
    /// A plain step with the running sequences, one token each (each stream's time per token).
    pub step_s: f64,
    /// Each draft row in a step (what one more decoding sequence adds: attention over the
    /// context, an output-head row, sampling).
    pub per_token_s: f64,
    /// Sequences every extra token delays.
    pub running: usize,
    /// What a step with `i + 1` draft rows measured beyond the plain step, where it did: the
    /// cost is not linear in the rows (the CPU's integer kernels tile 1–4 activation rows
    /// against 8 weight rows and 5–8 against 4: one stream's step measured 7.0 ms plain,
    /// 10.0 ms with 3 draft rows and 14.3 ms with 4).
    pub extra_s: [Option<f64>; MEASURED_ROWS],
    /// Whether the plain step was measured (not fitted), so a verify step's extra time will
    /// be: only then is an unmeasured draft length tried to learn its cost.
    pub plain_measured: bool,
}

impl StepCost {
    /// The cost of a step of `running` sequences from a step-time model `predict(sequences,
    /// tokens)` (`None` while it warms up) and what decode steps measured ([`DraftCost`]:
    /// the plain step, the draft row and each draft length at this batch size). Unmeasured,
    /// a draft row is priced as one more decoding
    /// sequence (`predict(n + 1, n + 1) − predict(n, n)`), not as one more token of the same
    /// sequences: like a decode row it attends over the whole context, gets an output-head
    /// row and is sampled, where a prompt token gets none of these.
    pub fn from_model(
        predict: impl Fn(usize, usize) -> Option<f64>,
        running: usize,
        measured: &DraftCost,
    ) -> Option<Self> {
        let n = running.max(1);
        let fitted_s = predict(n, n)?;
        let step_s = measured.plain_step(n).unwrap_or(fitted_s);
        let per_token_s = match measured.per_row(n) {
            Some(row_s) => row_s,
            None => predict(n + 1, n + 1)? - fitted_s,
        };
        Some(Self {
            step_s,
            per_token_s,
            running: n,
            extra_s: std::array::from_fn(|i| measured.extra(n, i + 1)),
            plain_measured: measured.plain_step(n).is_some(),
        })
    }

    /// A step's time beyond the plain one with `k` draft rows: measured, or `k` rows at
    /// [`per_token_s`](Self::per_token_s).
    pub fn extra(&self, k: usize) -> f64 {
        let measured = k
            .checked_sub(1)
            .and_then(|i| self.extra_s.get(i).copied().flatten());
        measured.unwrap_or(self.per_token_s * k as f64)
    }
}

/// Weight of each measurement in [`DraftCost`]'s averages.
const LEARN_COST: f64 = 0.3;
/// Batch-size buckets of [`DraftCost`]'s row cost: 1, 2–3, 4–7, … , 512 and more.
const COST_BUCKETS: usize = 10;

/// What a draft row costs, measured on decode steps (every sequence one token, plus its
/// draft): the plain decode step's time at each batch size, and per batch-size bucket the
/// time a verify step took beyond the plain step of its size, per draft row. A row costs
/// little where a step is bound by reading the weights (one stream) and about a whole
/// decode row where it is bound by compute (a large CPU batch). The step-time model cannot
/// tell: in a steady batch every plain step has as many tokens as sequences, a fit with
/// forgetting soon puts their whole cost in the intercept (drafts looked free again a few
/// dozen steps after the last verify step), and fitted through the verify steps themselves
/// it puts their fixed cost in the intercept too, so a plain step looked dearer and a draft
/// row cheaper than they are (quotes at 16 streams lost 10%).
#[derive(Debug, Clone, Default)]
pub struct DraftCost {
    plain_s: std::collections::HashMap<usize, f64>,
    per_row_s: [Option<f64>; COST_BUCKETS],
    /// Per bucket, a verify step's time beyond the plain step by its draft rows (1 to
    /// [`MEASURED_ROWS`]).
    extra_s: [[Option<f64>; MEASURED_ROWS]; COST_BUCKETS],
}

impl DraftCost {
    fn bucket(running: usize) -> usize {
        (running.max(1).ilog2() as usize).min(COST_BUCKETS - 1)
    }

    fn average(slot: &mut Option<f64>, x: f64) {
        *slot = Some(slot.map_or(x, |old| old + LEARN_COST * (x - old)));
    }

    /// Records a decode step of `running` sequences that ran `drafts` draft rows in `seconds`
    /// (steps holding a prompt chunk say nothing here).
    pub fn observe(&mut self, running: usize, drafts: usize, seconds: f64) {
        if running == 0 || !seconds.is_finite() {
            return;
        }
        if drafts == 0 {
            let mut slot = self.plain_s.get(&running).copied();
            Self::average(&mut slot, seconds);
            self.plain_s.extend(slot.map(|s| (running, s)));
        } else if let Some(&plain) = self.plain_s.get(&running) {
            let extra = (seconds - plain).max(0.0);
            let bucket = Self::bucket(running);
            // A length's first measurement starts from the rows' average so far.
            let linear = self.per_row_s[bucket].map(|row_s| row_s * drafts as f64);
            let slot = &mut self.extra_s[bucket][drafts.min(MEASURED_ROWS) - 1];
            let old = slot.or(linear);
            // One disturbed step (a shared machine: 90 ms for a 14 ms step) moves the
            // average by at most 30%: a length priced out stays out, since it is measured
            // again only when chosen.
            let clipped = old.map_or(extra, |old| extra.min(2.0 * old));
            *slot = Some(old.map_or(clipped, |old| old + LEARN_COST * (clipped - old)));
            Self::average(&mut self.per_row_s[bucket], clipped / drafts as f64);
        }
    }

    /// The measured plain decode step of `running` sequences.
    pub fn plain_step(&self, running: usize) -> Option<f64> {
        self.plain_s.get(&running).copied()
    }

    /// The measured cost of a draft row with `running` sequences, once a verify step ran there.
    pub fn per_row(&self, running: usize) -> Option<f64> {
        self.per_row_s[Self::bucket(running)]
    }

    /// The measured time a step of `running` sequences with `rows` draft rows took beyond
    /// the plain step.
    pub fn extra(&self, running: usize, rows: usize) -> Option<f64> {
        let i = rows.checked_sub(1)?;
        self.extra_s[Self::bucket(running)]
            .get(i)
            .copied()
            .flatten()
    }
}

/// Match lengths whose acceptance is learnt apart (longer ones share the last).
const MATCH_LENGTHS: usize = 8;

/// One sequence's acceptance estimates, by the length of the suffix its draft matched, and
/// the proposal it is waiting to score.
#[derive(Debug, Clone)]
pub struct DraftPolicy {
    alpha: [f64; MATCH_LENGTHS],
    /// The match length of the draft being verified.
    drafted_n: usize,
    /// The first token of a proposal that was not drafted and its match length: scored
    /// against the next token for free, so a sequence whose drafts were stopped can earn
    /// them back.
    shadow: Option<(u32, usize)>,
}

impl Default for DraftPolicy {
    fn default() -> Self {
        Self {
            alpha: [PRIOR; MATCH_LENGTHS],
            drafted_n: 1,
            shadow: None,
        }
    }
}

impl DraftPolicy {
    fn slot(n: usize) -> usize {
        n.clamp(1, MATCH_LENGTHS) - 1
    }

    /// The estimated chance that a draft token from an `n`-token match is accepted.
    pub fn acceptance(&self, n: usize) -> f64 {
        self.alpha[Self::slot(n)]
    }

    /// Notes that the coming verify step's draft came from an `n`-token match.
    pub fn drafting(&mut self, n: usize) {
        self.drafted_n = n;
    }

    /// Records a verify step: `accepted` of `drafted` tokens kept (the first rejection ends
    /// the step, so what followed it says nothing).
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        let n = self.drafted_n;
        for _ in 0..accepted {
            self.observe(n, true);
        }
        if accepted < drafted {
            self.observe(n, false);
        }
    }

    /// Keeps the first token of a proposal that was not drafted (and its match length), to
    /// score it.
    pub fn set_shadow(&mut self, predicted: Option<(u32, usize)>) {
        self.shadow = predicted;
    }

    /// Scores a pending shadow proposal against the token actually chosen.
    pub fn on_token(&mut self, token: u32) {
        if let Some((predicted, n)) = self.shadow.take() {
            self.observe(n, predicted == token);
        }
    }

    fn observe(&mut self, n: usize, hit: bool) {
        let alpha = &mut self.alpha[Self::slot(n)];
        *alpha += LEARN * (f64::from(u8::from(hit)) - *alpha);
    }

    /// The next draft's length from an `n`-token match, at most `max_k`: the one with the most
    /// tokens per second over the running sequences (this one's expected tokens, one from each
    /// other, against the plain step plus the draft's measured or estimated extra time). Tokens per
    /// step are what a stream waits for, so a longer draft that gives a little more in a much
    /// dearer step loses. `auto` drafts only when that beats the plain step; `ngram` always drafts
    /// at least one. Without a fitted model (`cost` is `None`) the full length. Shorter lengths
    /// whose cost is unmeasured are tried first, once each.
    pub fn length(
        &self,
        n: usize,
        mode: SpeculativeMode,
        max_k: usize,
        cost: Option<StepCost>,
    ) -> usize {
        if mode == SpeculativeMode::Off || max_k == 0 {
            return 0;
        }
        let Some(cost) = cost else {
            return max_k;
        };
        let alpha = self.acceptance(n);
        let others = cost.running.max(1) as f64 - 1.0;
        let rate = |k: usize| {
            (others + expected_tokens(alpha, k)) / (cost.step_s + cost.extra(k)).max(1e-12)
        };
        let (best, best_rate) = (1..=max_k)
            .map(|k| (k, rate(k)))
            .fold((1, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        if mode == SpeculativeMode::Auto && best_rate <= rate(0) {
            return 0;
        }
        // A shorter length not measured yet is priced by the rows' average, which a dearer
        // longer step sets (the 4-row step's 1.8 ms a row hid the 3-row step's 1 ms): it is
        // tried once, where it would pay, so it is measured.
        let unmeasured = |k: usize| cost.plain_measured && cost.extra_s.get(k - 1) == Some(&None);
        let pays = |k: usize| mode != SpeculativeMode::Auto || rate(k) > rate(0);
        (1..best)
            .rev()
            .find(|&k| unmeasured(k) && pays(k))
            .unwrap_or(best)
    }
}
