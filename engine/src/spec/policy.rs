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
}

impl StepCost {
    /// The cost of a step of `running` sequences from a step-time model `predict(sequences,
    /// tokens)` (`None` while it warms up) and what decode steps measured ([`DraftCost`]:
    /// the plain step and the draft row at this batch size). Unmeasured, a draft row is priced as one more decoding
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
        })
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
            let row_s = ((seconds - plain) / drafts as f64).max(0.0);
            Self::average(&mut self.per_row_s[Self::bucket(running)], row_s);
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
}

/// One sequence's acceptance estimate and the proposal it is waiting to score.
#[derive(Debug, Clone)]
pub struct DraftPolicy {
    alpha: f64,
    /// The first token of a proposal that was not drafted: scored against the next token for
    /// free, so a sequence whose drafts were stopped can earn them back.
    shadow: Option<u32>,
}

impl Default for DraftPolicy {
    fn default() -> Self {
        Self {
            alpha: PRIOR,
            shadow: None,
        }
    }
}

impl DraftPolicy {
    /// The estimated chance that a draft token is accepted.
    pub fn acceptance(&self) -> f64 {
        self.alpha
    }

    /// Records a verify step: `accepted` of `drafted` tokens kept (the first rejection ends
    /// the step, so what followed it says nothing).
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        for _ in 0..accepted {
            self.observe(true);
        }
        if accepted < drafted {
            self.observe(false);
        }
    }

    /// Keeps the first token of a proposal that was not drafted, to score it.
    pub fn set_shadow(&mut self, predicted: Option<u32>) {
        self.shadow = predicted;
    }

    /// Scores a pending shadow proposal against the token actually chosen.
    pub fn on_token(&mut self, token: u32) {
        if let Some(predicted) = self.shadow.take() {
            self.observe(predicted == token);
        }
    }

    fn observe(&mut self, hit: bool) {
        self.alpha += LEARN * (f64::from(u8::from(hit)) - self.alpha);
    }

    /// The next draft's length, at most `max_k`: the one with the largest expected saving
    /// (tokens gained times the step they save, less the extra tokens' cost to every running
    /// sequence). `auto` drafts only when that saving is positive; `ngram` always drafts at
    /// least one. Without a fitted model (`cost` is `None`) the full length.
    pub fn length(&self, mode: SpeculativeMode, max_k: usize, cost: Option<StepCost>) -> usize {
        if mode == SpeculativeMode::Off || max_k == 0 {
            return 0;
        }
        let Some(cost) = cost else {
            return max_k;
        };
        let gain = |k: usize| {
            (expected_tokens(self.alpha, k) - 1.0) * cost.step_s
                - cost.per_token_s * (k * cost.running.max(1)) as f64
        };
        let (best, saving) = (1..=max_k)
            .map(|k| (k, gain(k)))
            .fold((1, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        match mode {
            SpeculativeMode::Auto if saving <= 0.0 => 0,
            _ => best,
        }
    }
}
