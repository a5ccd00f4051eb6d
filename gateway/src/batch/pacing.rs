//! The runner's side of the batch pace (`pace`): each model's interactive histograms read at
//! the start and end of an interval, and the interval handed to the pure core.

use std::time::Duration;

use super::pace::{Interval, Latency, Pace};
use crate::metrics::{Histogram, ModelMetrics};

/// How often each model's batch pace is updated from the interactive latency of the
/// interval (see `pace`).
const PACE_INTERVAL: Duration = Duration::from_secs(5);

/// Interactive requests an interval waits for (up to [`PACE_LONGEST`]).
const PACE_MIN_SAMPLES: u64 = 20;

/// Longest pacing interval, when interactive requests trickle in.
const PACE_LONGEST: Duration = Duration::from_secs(30);

/// One model's pace and the interval it is measuring.
pub(super) struct Pacing {
    pub(super) pace: Pace,
    started: tokio::time::Instant,
    /// Interactive histograms' (count, sum) at the interval's start: TTFT, TPOT, end to end.
    ttft: (u64, f64),
    tpot: (u64, f64),
    e2e: (u64, f64),
    /// Whether a batch line ran in the interval.
    pub(super) batch_ran: bool,
}

/// A histogram's count and sum.
fn totals(histogram: &Histogram) -> (u64, f64) {
    (histogram.count(), histogram.sum())
}

/// The mean of what was observed between two (count, sum) readings; `None` without any.
fn mean_since(now: (u64, f64), before: (u64, f64)) -> Option<f64> {
    let count = now.0.saturating_sub(before.0);
    (count > 0).then(|| (now.1 - before.1) / count as f64)
}

impl Pacing {
    /// A first interval; the pace starts open when no interactive request is in flight
    /// (nobody to slow down yet: a batch on an idle model need not creep up from one line),
    /// else at one line.
    pub(super) fn start(
        model: &ModelMetrics,
        batch_ran: bool,
        interactive_now: bool,
        most: u32,
    ) -> Self {
        Self {
            pace: if interactive_now {
                Pace::default()
            } else {
                Pace::open(most)
            },
            started: tokio::time::Instant::now(),
            ttft: totals(&model.ttft),
            tpot: totals(&model.tpot),
            e2e: totals(&model.e2e),
            batch_ran,
        }
    }

    /// Ends the interval when it has shown enough: the pace takes it into account, and the
    /// next one starts. An interval lasts at least [`PACE_INTERVAL`], and then until it saw
    /// no interactive request at all, or [`PACE_MIN_SAMPLES`] of them, or [`PACE_LONGEST`]
    /// went by: a trickle of interactive requests is still someone to protect, not an idle
    /// model. Means, not quantiles, are compared: they are exact (the histograms' sums),
    /// where a quantile read from buckets a third apart cannot see the 10% this guards.
    pub(super) fn roll(&mut self, model: &ModelMetrics, running: bool, most: u32) {
        let elapsed = self.started.elapsed();
        if elapsed < PACE_INTERVAL {
            return;
        }
        let (ttft, tpot, e2e) = (totals(&model.ttft), totals(&model.tpot), totals(&model.e2e));
        let seen = e2e.0.saturating_sub(self.e2e.0);
        if seen > 0 && seen < PACE_MIN_SAMPLES && elapsed < PACE_LONGEST {
            return;
        }
        // Streams show time to first token; without streams, end-to-end time stands in.
        let first = mean_since(ttft, self.ttft).or_else(|| mean_since(e2e, self.e2e));
        let interactive = first.map(|ttft_s| Latency {
            ttft_s,
            tpot_s: mean_since(tpot, self.tpot).unwrap_or(0.0),
        });
        let before = self.pace.limit();
        self.pace.update(
            Interval {
                interactive,
                batch_ran: self.batch_ran || running,
            },
            most,
        );
        if self.pace.limit() != before {
            tracing::debug!(before, after = self.pace.limit(), ?interactive, baseline = ?self.pace.baseline(), "batch pace");
        }
        (self.ttft, self.tpot, self.e2e) = (ttft, tpot, e2e);
        self.started = tokio::time::Instant::now();
        self.batch_ran = running;
    }
}
