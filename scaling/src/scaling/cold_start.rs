//! Cold starts as measured: how long a replica takes from being asked for to serving (a pod
//! scheduled, its image pulled, the model loaded, the readiness probe passed).
//!
//! Only the scale target's counts are needed: each replica asked for and not ready yet
//! (`desired − ready`, see [`pending_replicas`]) waits from the first time it was seen
//! pending; when the ready count rises, the oldest waits end. Two estimates come from them:
//! - the **expected cold start**, the longest of the latest few: the gateway holds a request
//!   for a model at zero replicas that long plus the TTFT SLO (a typical start would drop the
//!   requests of every slower one);
//! - the **lead time** the policy plans with (time to capacity): a high quantile of the recent
//!   starts, so that capacity ordered for a rise arrives before it in most starts without one
//!   slow image pull setting the plan for hours.

use std::collections::VecDeque;

use super::model_loop::pending_replicas;
use crate::scale::ReplicaCounts;

/// Measured cold starts kept (newest last): enough for the lead time's quantile.
const KEEP: usize = 20;

/// The expected cold start is the longest of this many latest starts.
const LATEST: usize = 5;

/// The lead time is this quantile of the kept starts (nearest rank: with ten or fewer starts,
/// the longest).
const LEAD_QUANTILE: f64 = 0.9;

/// The cold starts of one model's replicas.
#[derive(Debug, Clone, Default)]
pub struct ColdStarts {
    /// For each replica asked for and not ready yet, oldest first: when it was first seen
    /// pending (`None`: already pending at the first look, start unknown).
    waiting: VecDeque<Option<f64>>,
    /// The ready count at the last look.
    last_ready: Option<u32>,
    /// The latest measured cold starts, seconds.
    measured: VecDeque<f64>,
}

impl ColdStarts {
    /// Starts from the cold starts another process measured (status carries them, oldest
    /// first; only the most recent [`KEEP`] are kept).
    pub fn resumed(measured_s: impl IntoIterator<Item = f64>) -> Self {
        let mut resumed = Self::default();
        for seconds in measured_s {
            if seconds.is_finite() && seconds >= 0.0 {
                resumed.push(seconds);
            }
        }
        resumed
    }

    /// Folds the scale target's counts at `now_s` in (any time: the more often, the finer).
    pub fn observe(&mut self, now_s: f64, counts: ReplicaCounts) {
        if let Some(last) = self.last_ready {
            // Replicas that became ready since the last look end the oldest waits.
            let arrived = counts.ready.saturating_sub(last);
            for _ in 0..arrived {
                match self.waiting.pop_front() {
                    Some(Some(asked_s)) => self.push(now_s - asked_s),
                    Some(None) => {}
                    None => break,
                }
            }
        }
        let pending = pending_replicas(counts) as usize;
        let start = self.last_ready.map(|_| now_s);
        // New orders (a scale-out, a ready replica lost and replaced) wait from now; orders
        // withdrawn (a scale-in) drop the newest waits.
        while self.waiting.len() < pending {
            self.waiting.push_back(start);
        }
        self.waiting.truncate(pending);
        self.last_ready = Some(counts.ready);
    }

    /// Notes `replicas` ordered at `now_s` by the scaler itself (a scale-out it decided): they
    /// wait from the order, not from the next look, so a replica ready before that look (a
    /// start shorter than the sampling interval) is timed too. An order the scale target did
    /// not carry out (a GPU budget cut it) is dropped at the next look, as a withdrawn one is.
    pub fn ordered(&mut self, now_s: f64, replicas: u32) {
        for _ in 0..replicas {
            self.waiting.push_back(Some(now_s));
        }
    }

    /// The longest of the latest measured cold starts, seconds; `None` before any.
    pub fn expected_s(&self) -> Option<f64> {
        let skip = self.measured.len().saturating_sub(LATEST);
        self.measured.iter().skip(skip).copied().reduce(f64::max)
    }

    /// The lead time measured so far: the [`LEAD_QUANTILE`] of the kept starts, seconds;
    /// `None` before any (the spec's hint stands until then).
    pub fn lead_time_s(&self) -> Option<f64> {
        let mut sorted: Vec<f64> = self.measured.iter().copied().collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let rank = (LEAD_QUANTILE * sorted.len() as f64).ceil() as usize;
        Some(sorted[rank.clamp(1, sorted.len()) - 1])
    }

    /// The kept starts, seconds, oldest first (what status carries across a failover).
    pub fn measured_s(&self) -> Vec<f64> {
        self.measured.iter().copied().collect()
    }

    fn push(&mut self, seconds: f64) {
        if self.measured.len() == KEEP {
            self.measured.pop_front();
        }
        self.measured.push_back(seconds.max(0.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(desired: u32, ready: u32) -> ReplicaCounts {
        ReplicaCounts {
            desired,
            current: desired,
            ready,
        }
    }

    #[test]
    fn each_replica_is_timed_from_its_order_to_ready() {
        let mut c = ColdStarts::default();
        c.observe(0.0, counts(1, 1));
        c.observe(10.0, counts(3, 1)); // two more asked for
        assert_eq!(c.expected_s(), None, "none ready yet");
        c.observe(100.0, counts(3, 2));
        assert_eq!(c.expected_s(), Some(90.0));
        c.observe(130.0, counts(3, 3));
        assert_eq!(c.expected_s(), Some(120.0), "the longest of the latest");
    }

    #[test]
    fn a_withdrawn_order_is_not_timed_and_a_replaced_replica_is() {
        let mut c = ColdStarts::default();
        c.observe(0.0, counts(2, 2));
        c.observe(10.0, counts(4, 2));
        c.observe(20.0, counts(3, 2)); // scaled back in before either served
        c.observe(70.0, counts(3, 3)); // the remaining order, asked for at 10 s
        assert_eq!(c.expected_s(), Some(60.0));
        // A ready replica dies and its replacement starts: that is a cold start too.
        c.observe(200.0, counts(3, 2));
        c.observe(245.0, counts(3, 3));
        assert_eq!(c.measured.iter().copied().collect::<Vec<_>>(), [60.0, 45.0]);
    }

    #[test]
    fn an_order_ready_before_the_next_look_is_timed_from_the_order() {
        let mut c = ColdStarts::default();
        c.observe(0.0, counts(0, 0));
        c.ordered(10.0, 1);
        // Ready at the very next look: never seen pending, timed from the order.
        c.observe(10.6, counts(1, 1));
        assert_eq!(c.expected_s().map(|s| (s * 10.0).round() / 10.0), Some(0.6));
        // An order cut before it was carried out (a GPU budget) is dropped at the next look.
        c.ordered(20.0, 3);
        c.observe(21.0, counts(2, 1));
        c.observe(50.0, counts(2, 2));
        assert_eq!(c.measured.len(), 2);
        assert_eq!(c.measured.back().copied(), Some(30.0));
    }

    #[test]
    fn what_was_pending_before_the_first_look_is_not_timed() {
        // A new leader cannot know when those were asked for: timing them from its first look
        // would understate the cold start.
        let mut c = ColdStarts::resumed([80.0]);
        c.observe(0.0, counts(3, 1));
        c.observe(5.0, counts(3, 3));
        assert_eq!(c.expected_s(), Some(80.0), "the carried estimate stands");
    }

    #[test]
    fn only_the_latest_few_count() {
        let mut c = ColdStarts::default();
        c.observe(0.0, counts(0, 0));
        let mut t = 0.0;
        for seconds in [300.0, 40.0, 40.0, 40.0, 40.0, 40.0] {
            c.observe(t, counts(1, 0));
            t += seconds;
            c.observe(t, counts(1, 1));
            t += 1.0;
            c.observe(t, counts(0, 0));
        }
        assert_eq!(c.expected_s(), Some(40.0), "the slow start has aged out");
        assert_eq!(
            c.lead_time_s(),
            Some(300.0),
            "the lead time still counts it: one start in six"
        );
    }

    #[test]
    fn the_lead_time_is_a_high_quantile_of_the_recent_starts() {
        assert_eq!(ColdStarts::default().lead_time_s(), None);
        // Twenty starts of 60 s with two slow ones: the 90th percentile is a typical start;
        // the expected cold start (the gateway's hold) is the slowest of the latest five.
        let mut starts = vec![60.0; 18];
        starts.insert(3, 600.0);
        starts.push(120.0);
        let c = ColdStarts::resumed(starts.clone());
        assert_eq!(c.lead_time_s(), Some(60.0));
        assert_eq!(c.expected_s(), Some(120.0));
        // Three slow starts in twenty: the quantile reaches them.
        starts[10] = 300.0;
        starts[11] = 300.0;
        assert_eq!(ColdStarts::resumed(starts).lead_time_s(), Some(300.0));
        // What status carries reads back whole, and only the latest KEEP stay.
        let long = ColdStarts::resumed((0..30).map(f64::from));
        assert_eq!(
            long.measured_s(),
            (10..30).map(f64::from).collect::<Vec<_>>()
        );
    }
}
