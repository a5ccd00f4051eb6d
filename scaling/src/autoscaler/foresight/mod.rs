//! Foresight: each model's recurring demand learned from its own history (daily and weekly
//! curves, on/off cycles, recurring bursts), so capacity can be ordered one lead time ahead
//! of a rise that has come at the same phase before.
//!
//! Pure and clock-free like the rest of the policy: the history is kept at three
//! resolutions ([`TIERS`]: 20 s bins over 3 hours for cycles of minutes, 5-minute bins over
//! two days for daily curves, hourly bins over two weeks for weekly ones); each looks for the
//! lag at which its series repeats (`period`). It acts only on evidence: two whole cycles
//! seen, the latest matching the one before (correlation ≥ 0.8, the bins off by at most 15%
//! of the swing on average), a swing of at least a quarter of the mean; and a rise counts
//! only when both previous cycles had it at that phase. A series without recurrence (noise,
//! a one-off step, a ramp) predicts nothing, so the policy decides exactly as without it.
//! What a prediction may cost is bounded by the policy (`ahead`): replicas for it are
//! ordered at most one lead time early and go by the ordinary scale-in rules when the
//! demand does not come; the next cycle that does not repeat ends the evidence.

mod ahead;
mod period;
mod record;
#[cfg(test)]
mod tests;
mod tier;

pub(crate) use ahead::{Ahead, ahead, prewarmed, scale_in_floor};
pub use record::{ForesightRecord, TierRecord};

use tier::Tier;

/// The resolutions kept: bin width in seconds and bins. 540 + 576 + 336 levels, about 4 KB
/// in status as u16 levels.
pub const TIERS: [(f64, usize); 3] = [(20.0, 540), (300.0, 576), (3600.0, 336)];

/// A demand the history predicts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// The highest demand predicted within the horizon asked about, tokens/s.
    pub tokens_per_s: f64,
    /// When it is predicted (policy clock, seconds).
    pub at_s: f64,
    /// The period it was read from, seconds.
    pub period_s: f64,
}

/// The demand history of one model at every resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Foresight {
    tiers: Vec<Tier>,
    /// The wall clock minus the policy clock, seconds, as last told (for messages only).
    pub(crate) wall_offset_s: Option<f64>,
}

impl Default for Foresight {
    fn default() -> Self {
        Self {
            tiers: TIERS
                .iter()
                .map(|&(bin_s, bins)| Tier::new(bin_s, bins))
                .collect(),
            wall_offset_s: None,
        }
    }
}

impl Foresight {
    /// Adds this period's offered demand, tokens/s, at `now_s` (policy clock).
    pub fn record(&mut self, now_s: f64, tokens_per_s: f64) {
        for tier in &mut self.tiers {
            tier.record(now_s, tokens_per_s);
        }
    }

    /// The highest demand predicted in `(from_s, to_s]` by the finest resolution that found
    /// a period (a coarser one smooths a rise over its bins); `None` when none has.
    pub fn peak(&self, from_s: f64, to_s: f64) -> Option<Prediction> {
        let (tier, period) = self.tiers.iter().find_map(|t| Some((t, t.period()?)))?;
        // Read at quarter bins: a peak between two bin centres is not missed.
        let step_s = 0.25 * tier.bin_s;
        let steps = (((to_s - from_s) / step_s).ceil().max(1.0) as usize).min(4_000);
        (1..=steps)
            .map(|i| from_s + (i as f64 * step_s).min(to_s - from_s))
            .filter_map(|t| Some((t, tier.predict(t)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(at_s, tokens_per_s)| Prediction {
                tokens_per_s,
                at_s,
                period_s: period.lag as f64 * tier.bin_s,
            })
    }

    /// The period predictions are read from, seconds (the finest resolution's), if any.
    pub fn period_s(&self) -> Option<f64> {
        self.tiers
            .iter()
            .find_map(|t| Some(t.period()?.lag as f64 * t.bin_s))
    }

    /// Whether anything was recorded.
    pub fn is_empty(&self) -> bool {
        self.tiers.iter().all(|t| t.levels().next().is_none())
    }
}
