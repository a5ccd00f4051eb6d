//! What a paced run's latencies say: quantiles, and how the slowest 1% is spread in time.
//!
//! A p99 made of requests spread evenly over the run is the proxy's own cost per request; one
//! made of a few bursts is something stopping the proxy (or the machine) for milliseconds at a
//! time — on the small shared VMs this runs on, kernel threads taking the proxy's core (seen
//! with `perf sched`: a memory-monitoring thread every 0.5 s for 1-4 ms, RCU, compaction).
//! After a stop of `T` the backlog drains at `1 - load` of the core's speed, so the requests it
//! delays grow as `T / (1 - load)`: a proxy whose core is 85% busy turns each stop into ~7 times
//! as many slow requests as it would at 0% load, one at 65% into ~3 times.

use std::time::Duration;

use crate::paced::Sample;

/// Slow requests whose scheduled times are closer than this belong to one burst.
const BURST_GAP: Duration = Duration::from_millis(2);

/// A paced run, summarised.
pub struct Tail {
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub requests: usize,
    /// Bursts the requests at or over p99 fall into.
    pub bursts: usize,
    /// The share of those requests in the three largest bursts.
    pub top3_share: f64,
    /// The largest burst: from its first to its last request's scheduled time.
    pub longest: Duration,
    /// The median over the run's 100-ms windows of each window's p99: the tail of a typical
    /// stretch, which a few stops of the core do not move (the p99 above is the real one).
    pub typical_window_p99: Duration,
}

impl Tail {
    /// `samples` in the order they were scheduled.
    pub fn of(samples: &[Sample]) -> Self {
        let mut sorted: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
        sorted.sort();
        let p99 = quantile(&sorted, 0.99);
        // (first scheduled, last scheduled, count) of each burst.
        let mut bursts: Vec<(Duration, Duration, usize)> = Vec::new();
        for slow in samples.iter().filter(|s| s.latency >= p99) {
            match bursts.last_mut() {
                Some((_, last, count)) if slow.scheduled.saturating_sub(*last) < BURST_GAP => {
                    *last = slow.scheduled;
                    *count += 1;
                }
                _ => bursts.push((slow.scheduled, slow.scheduled, 1)),
            }
        }
        let slow: usize = bursts.iter().map(|b| b.2).sum();
        let mut counts: Vec<usize> = bursts.iter().map(|b| b.2).collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top3: usize = counts.iter().take(3).sum();
        let mut window_p99s: Vec<Duration> = samples
            .chunk_by(|a, b| a.scheduled.as_millis() / 100 == b.scheduled.as_millis() / 100)
            .map(|window| {
                let mut latencies: Vec<Duration> = window.iter().map(|s| s.latency).collect();
                latencies.sort();
                quantile(&latencies, 0.99)
            })
            .collect();
        window_p99s.sort();
        Self {
            typical_window_p99: quantile(&window_p99s, 0.5),
            p50: quantile(&sorted, 0.5),
            p99,
            p999: quantile(&sorted, 0.999),
            requests: samples.len(),
            bursts: bursts.len(),
            top3_share: top3 as f64 / slow.max(1) as f64,
            longest: bursts.iter().map(|b| b.1 - b.0).max().unwrap_or_default(),
        }
    }

    /// `slowest 1% in 7 bursts (62% in the largest 3; longest 18.2 ms); typical 100 ms p99 412 µs`.
    pub fn bursts_text(&self) -> String {
        format!(
            "slowest 1% in {} bursts ({:.0}% in the largest 3; longest {:.1} ms); typical 100 ms p99 {:.0} µs",
            self.bursts,
            self.top3_share * 100.0,
            self.longest.as_secs_f64() * 1e3,
            self.typical_window_p99.as_secs_f64() * 1e6
        )
    }
}

/// The `q` quantile of sorted durations (zero when empty).
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}
