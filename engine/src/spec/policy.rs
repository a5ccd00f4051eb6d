//! How long a sequence's next draft is: its measured acceptance, and whether a verify step of
//! that length pays for itself under the engine's step-time model. Pure.

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
    /// Each extra token in a step.
    pub per_token_s: f64,
    /// Sequences every extra token delays.
    pub running: usize,
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
