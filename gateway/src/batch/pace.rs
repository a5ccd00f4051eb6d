//! How many batch lines a model may run on this pod, from what interactive users feel.
//!
//! Free slots are not free capacity: a batch line shares the engine's steps with interactive
//! requests, and on a CPU (or a GPU past its knee) each line it adds makes every step
//! slower. So the runner paces batch lines by the interactive latency the gateway measures,
//! interval by interval (additive increase, multiplicative decrease, like TCP):
//! - with no interactive traffic there is nothing to protect: the limit opens up;
//! - in an interval with no batch line running, the interactive means are the baseline;
//! - in an interval with batch lines running, interactive means past the baseline by more
//!   than [`TOLERANCE`] halve the limit (down to zero, which makes the next intervals quiet
//!   ones: the baseline is measured again); within it, the limit grows by a quarter.
//!
//! Means, not p95s, steer: the p95 of a few seconds of requests is nearly their maximum and
//! moves by a third between two quiet intervals, so it would stop batch work on noise, and
//! quantiles read from histogram buckets a third apart cannot resolve 10%; contention with
//! batch steps slows every request, which the exact mean shows.
//!
//! Until a baseline exists the limit stays at one line: a gateway restarted in the middle of
//! a batch learns what interactive latency is without batch work before adding more.

/// Interactive latency of an interval (the runner passes means), in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Time to first token.
    pub ttft_s: f64,
    /// Time per output token (0 when unmeasured).
    pub tpot_s: f64,
}

/// What one interval showed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// The interactive means, when interactive requests were measured.
    pub interactive: Option<Latency>,
    /// Whether any batch line ran in it.
    pub batch_ran: bool,
}

/// How far above its baseline the interactive mean may go while batch lines run. The Batch
/// API promises interactive p95s within 10% of a run without the batch; the tail moves more
/// than the mean (a batch line's prefill lengthens the steps it shares), and 8% on the mean
/// let TTFT p95 rise 16% on the sim backend, 3% kept it within 5%.
pub const TOLERANCE: f64 = 1.03;

/// Weight of the newest quiet interval in the baseline.
const ALPHA: f64 = 0.3;

/// Intervals at zero before one line is tried again.
const PROBE_AFTER: u32 = 2;

/// The pacing state of one model on one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Pace {
    limit: u32,
    baseline: Option<Latency>,
    at_zero: u32,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            limit: 1,
            baseline: None,
            at_zero: 0,
        }
    }
}

impl Pace {
    /// A pace starting open at `most` lines (no interactive request in flight when batch
    /// work begins); the first interval with interactive requests and batch lines measures
    /// no baseline and so stops batch lines to measure one.
    pub fn open(most: u32) -> Self {
        Self {
            limit: most.max(1),
            ..Self::default()
        }
    }

    /// Batch lines the model may run now.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The interactive baseline, once measured.
    pub fn baseline(&self) -> Option<Latency> {
        self.baseline
    }

    /// Takes one interval into account; `most` caps the limit (the slots batch work may
    /// take at all).
    pub fn update(&mut self, interval: Interval, most: u32) {
        let grow = |limit: u32| (limit + (limit / 4).max(1)).min(most.max(1));
        let Some(now) = interval.interactive else {
            // Nobody to protect.
            self.limit = most.max(1);
            self.at_zero = 0;
            return;
        };
        if !interval.batch_ran {
            self.baseline = Some(match self.baseline {
                None => now,
                Some(old) => Latency {
                    ttft_s: old.ttft_s + ALPHA * (now.ttft_s - old.ttft_s),
                    tpot_s: old.tpot_s + ALPHA * (now.tpot_s - old.tpot_s),
                },
            });
            if self.limit == 0 {
                self.at_zero += 1;
                if self.at_zero >= PROBE_AFTER {
                    self.limit = 1;
                    self.at_zero = 0;
                }
            }
            return;
        }
        let Some(base) = self.baseline else {
            // Batch lines ran before any quiet interval: stop them to measure one.
            self.limit = 0;
            return;
        };
        let worse = now.ttft_s > base.ttft_s * TOLERANCE
            || (base.tpot_s > 0.0 && now.tpot_s > base.tpot_s * TOLERANCE);
        if worse {
            self.limit /= 2;
        } else {
            self.limit = grow(self.limit);
        }
        self.at_zero = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(ttft_s: f64, batch_ran: bool) -> Interval {
        Interval {
            interactive: Some(Latency {
                ttft_s,
                tpot_s: 0.02,
            }),
            batch_ran,
        }
    }

    #[test]
    fn without_interactive_traffic_batch_takes_every_slot() {
        let mut pace = Pace::default();
        let idle = Interval {
            interactive: None,
            batch_ran: true,
        };
        pace.update(idle, 48);
        assert_eq!(pace.limit(), 48);
    }

    #[test]
    fn batch_grows_while_interactive_latency_holds_and_halves_when_it_moves() {
        let mut pace = Pace::default();
        pace.update(seen(0.10, false), 48);
        assert_eq!(pace.baseline().map(|b| b.ttft_s), Some(0.10));
        let mut limits = Vec::new();
        for _ in 0..6 {
            pace.update(seen(0.102, true), 48);
            limits.push(pace.limit());
        }
        assert_eq!(limits, [2, 3, 4, 5, 6, 7]);
        pace.update(seen(0.12, true), 48);
        assert_eq!(pace.limit(), 3);
        // A slower TPOT counts too.
        pace.update(
            Interval {
                interactive: Some(Latency {
                    ttft_s: 0.1,
                    tpot_s: 0.03,
                }),
                batch_ran: true,
            },
            48,
        );
        assert_eq!(pace.limit(), 1);
    }

    #[test]
    fn at_zero_the_baseline_is_measured_again_and_one_line_is_tried() {
        let mut pace = Pace::default();
        pace.update(seen(0.2, false), 8);
        pace.update(seen(1.0, true), 8);
        assert_eq!(pace.limit(), 0);
        pace.update(seen(0.4, false), 8);
        assert_eq!(pace.limit(), 0);
        pace.update(seen(0.4, false), 8);
        assert_eq!(pace.limit(), 1);
        // The baseline moved towards the quiet intervals (heavier interactive traffic).
        assert!(pace.baseline().is_some_and(|b| b.ttft_s > 0.25));
    }

    #[test]
    fn an_open_pace_stops_once_interactive_traffic_shows_up_then_learns_it() {
        let mut pace = Pace::open(12);
        assert_eq!(pace.limit(), 12);
        pace.update(seen(0.3, true), 12);
        assert_eq!(pace.limit(), 0);
        pace.update(seen(0.2, false), 12);
        pace.update(seen(0.2, false), 12);
        assert_eq!(pace.limit(), 1);
    }

    #[test]
    fn batch_running_before_any_baseline_stops_to_measure_one() {
        let mut pace = Pace::default();
        pace.update(seen(0.3, true), 8);
        assert_eq!(pace.limit(), 0);
        assert_eq!(pace.baseline(), None);
    }
}
