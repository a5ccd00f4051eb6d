//! The adaptive in-flight cap of a replica whose engine we do not control: AIMD on the TPOT
//! and TTFT the gateway measures.
//!
//! AIMD rather than gradient2: the SLO gives an absolute target, so the rule compares each
//! window's p95 with it directly (no learned "no-load" latency to drift, which gradient2
//! needs and which a busy replica never shows); +1 when a full window stayed under the
//! target with margin, x0.8 when it went over. The cap stays between 1 and the ceiling (the
//! replica's `replica_concurrency`, which the engine's own limit bounds).

use std::time::Duration;

/// The SLO the cap holds: TPOT p95, and TTFT p95 when set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slo {
    /// Time per output token, p95.
    pub tpot_p95: Duration,
    /// Time to first token, p95 (counted from dispatch to the replica).
    pub ttft_p95: Option<Duration>,
}

impl Slo {
    /// A static model's `slo:` from the config.
    pub fn of_config(slo: crate::config::ModelSlo) -> Self {
        Self {
            tpot_p95: Duration::from_millis(slo.tpot_p95_ms),
            ttft_p95: slo.ttft_p95_ms.map(Duration::from_millis),
        }
    }
}

/// One finished request as the replica served it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds per output token.
    pub tpot: f64,
    /// Seconds to the first token, when the answer streamed.
    pub ttft: Option<f64>,
    /// Requests in flight on the replica when this one was sent (itself included).
    pub in_flight: u32,
}

/// Requests per decision: enough for a p95 that is not just the maximum of a handful.
pub const WINDOW: usize = 20;
/// A window's p95 must stay under this share of the target before the cap grows.
pub const MARGIN: f64 = 0.9;
/// The cap's factor when a window's p95 went over the target.
pub const DECREASE: f64 = 0.8;

/// The AIMD limiter of one replica.
#[derive(Debug, Clone)]
pub struct Aimd {
    slo: Slo,
    limit: u32,
    ceiling: u32,
    window: Vec<Sample>,
}

impl Aimd {
    /// A limiter under `ceiling` (at least 1), starting there: unchanged behaviour until
    /// the measurements say otherwise.
    pub fn new(slo: Slo, ceiling: u32) -> Self {
        let ceiling = ceiling.max(1);
        Self {
            slo,
            limit: ceiling,
            ceiling,
            window: Vec::with_capacity(WINDOW),
        }
    }

    /// Whether it holds `slo` under `ceiling` (else a new one replaces it).
    pub fn holds(&self, slo: Slo, ceiling: u32) -> bool {
        self.slo == slo && self.ceiling == ceiling.max(1)
    }

    /// The cap now.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Counts `sample`; at the end of a window, moves the cap and returns it.
    pub fn record(&mut self, sample: Sample) -> Option<u32> {
        self.window.push(sample);
        if self.window.len() < WINDOW {
            return None;
        }
        let window = std::mem::take(&mut self.window);
        let tpot = p95(window.iter().map(|s| s.tpot));
        let ttft = p95(window.iter().filter_map(|s| s.ttft));
        let busiest = window.iter().map(|s| s.in_flight).max().unwrap_or(0);
        let ratio = self.worst_ratio(tpot, ttft);
        if ratio > 1.0 {
            self.limit = ((f64::from(self.limit) * DECREASE).floor() as u32).max(1);
        } else if ratio < MARGIN && busiest >= self.limit {
            // Only a cap that was reached is known to be safe to raise.
            self.limit = (self.limit + 1).min(self.ceiling);
        }
        Some(self.limit)
    }

    /// The larger of measured/target over TPOT and (when set) TTFT.
    fn worst_ratio(&self, tpot: Option<f64>, ttft: Option<f64>) -> f64 {
        let tpot_ratio = tpot.map_or(0.0, |t| t / self.slo.tpot_p95.as_secs_f64().max(1e-9));
        let ttft_ratio = match (ttft, self.slo.ttft_p95) {
            (Some(t), Some(target)) => t / target.as_secs_f64().max(1e-9),
            _ => 0.0,
        };
        tpot_ratio.max(ttft_ratio)
    }
}

/// The 95th percentile (nearest rank) of `values`; `None` when empty.
fn p95(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let rank = ((sorted.len() as f64) * 0.95).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLO: Slo = Slo {
        tpot_p95: Duration::from_millis(50),
        ttft_p95: None,
    };

    /// A synthetic replica: TPOT 10 ms plus 2 ms per concurrent request (the knee of a 50 ms
    /// target is 20), with a little deterministic spread.
    fn tpot_at(concurrency: u32, i: usize) -> f64 {
        let spread = 1.0 + 0.04 * ((i % 5) as f64 - 2.0) / 2.0;
        (0.010 + 0.002 * f64::from(concurrency)) * spread
    }

    /// Runs `windows` windows of a saturated replica (always at its cap), `slow` adding to
    /// TPOT; returns the caps seen.
    fn run(limiter: &mut Aimd, windows: usize, slow: f64) -> Vec<u32> {
        let mut caps = Vec::new();
        for w in 0..windows {
            for i in 0..WINDOW {
                let concurrency = limiter.limit();
                let tpot = tpot_at(concurrency, w + i) + slow;
                let sample = Sample {
                    tpot,
                    ttft: None,
                    in_flight: concurrency,
                };
                if let Some(cap) = limiter.record(sample) {
                    caps.push(cap);
                }
            }
        }
        caps
    }

    #[test]
    fn converges_to_the_knee_and_never_exceeds_the_ceiling() {
        let mut limiter = Aimd::new(SLO, 64);
        let caps = run(&mut limiter, 200, 0.0);
        assert!(caps.iter().all(|&c| (1..=64).contains(&c)));
        // After settling, the cap saws just under the knee (20): AIMD's band is x0.8..1.
        let settled = &caps[100..];
        let (low, high) = (settled.iter().min(), settled.iter().max());
        assert!(low.is_some_and(|&l| l >= 14), "settled caps {settled:?}");
        assert!(high.is_some_and(|&h| h <= 20), "settled caps {settled:?}");
        // A ceiling under the knee holds.
        let mut low_ceiling = Aimd::new(SLO, 8);
        let caps = run(&mut low_ceiling, 50, 0.0);
        assert_eq!(caps.last(), Some(&8));
        assert!(caps.iter().all(|&c| c <= 8));
    }

    #[test]
    fn recovers_after_a_slow_period() {
        let mut limiter = Aimd::new(SLO, 64);
        run(&mut limiter, 100, 0.0);
        // The replica slows down (another tenant on its GPU): the cap falls to 1...
        let slow = run(&mut limiter, 40, 0.060);
        assert_eq!(slow.last(), Some(&1));
        // ...and climbs back to the knee once it is fast again.
        let after = run(&mut limiter, 100, 0.0);
        assert!(
            after.last().is_some_and(|&c| (14..=20).contains(&c)),
            "{after:?}"
        );
    }

    #[test]
    fn ttft_over_its_target_lowers_the_cap_and_an_unused_cap_does_not_grow() {
        let slo = Slo {
            ttft_p95: Some(Duration::from_millis(200)),
            ..SLO
        };
        let mut limiter = Aimd::new(slo, 10);
        let late = Sample {
            tpot: 0.010,
            ttft: Some(0.500),
            in_flight: 10,
        };
        let caps: Vec<u32> = (0..WINDOW).filter_map(|_| limiter.record(late)).collect();
        assert_eq!(caps, vec![8]);
        let idle = Sample {
            tpot: 0.010,
            ttft: Some(0.010),
            in_flight: 2,
        };
        let caps: Vec<u32> = (0..WINDOW).filter_map(|_| limiter.record(idle)).collect();
        assert_eq!(caps, vec![8], "two in flight say nothing about a cap of 8");
    }
}
