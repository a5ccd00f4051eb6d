//! What the simulated gateway measures: its `/metrics` (see `exposition`), which the
//! operator's scaling loop scrapes with the scrape delay; per-second slots (arrivals, tokens,
//! latency, queue gauges) the baseline policies read; and the ground truth the report is
//! scored on (per-minute SLO checks, per-request attainment, goodput).

use tokenscale_common::exposition::quantile;

use super::exposition::Exposition;

/// Histogram buckets: 5% wide, from 0.1 ms to about 4 minutes.
const BUCKETS: usize = 300;
const BUCKET_MIN_S: f64 = 1e-4;
const BUCKET_GROWTH: f64 = 1.05;
/// Seconds of history kept for observations (longer than any window plus scrape delay).
pub const RING_S: usize = 900;

/// Log-bucketed latency histogram with fractional weights.
#[derive(Debug, Clone)]
pub struct Histogram(Box<[f64; BUCKETS]>);

impl Default for Histogram {
    fn default() -> Self {
        Self(Box::new([0.0; BUCKETS]))
    }
}

impl Histogram {
    fn add(&mut self, value_s: f64, weight: f64) {
        let index = ((value_s.max(BUCKET_MIN_S) / BUCKET_MIN_S).ln() / BUCKET_GROWTH.ln()) as usize;
        self.0[index.min(BUCKETS - 1)] += weight;
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    fn clear(&mut self) {
        self.0.fill(0.0);
    }

    /// The `q` quantile, by the one histogram-bucket quantile (linear inside the bucket);
    /// `None` when empty. The last bucket also holds everything above it, so it is `+Inf`.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut total = 0.0;
        let buckets: Vec<(f64, f64)> = self
            .0
            .iter()
            .enumerate()
            .map(|(index, weight)| {
                total += weight;
                let upper = if index + 1 == BUCKETS {
                    f64::INFINITY
                } else {
                    BUCKET_MIN_S * BUCKET_GROWTH.powf(index as f64 + 1.0)
                };
                (upper, total)
            })
            .collect();
        quantile(q, &buckets)
    }
}

/// One second of measurements (what HPA and the knee search read; the scaling loop reads the
/// exposition).
#[derive(Debug, Clone, Default)]
struct Slot {
    second: u64,
    queued: f64,
    running: f64,
    ttft: Histogram,
    tpot: Histogram,
}

/// One minute of ground truth: request weights and the weights over each target.
#[derive(Debug, Clone, Copy, Default)]
pub struct Minute {
    ttft_total: f64,
    ttft_over: f64,
    tpot_total: f64,
    tpot_over: f64,
}

impl Minute {
    /// Whether this minute's p95 TTFT and p95 TPOT both met their targets (a minute without
    /// requests meets them).
    pub fn met(&self) -> bool {
        self.ttft_over <= 0.05 * self.ttft_total + 1e-9
            && self.tpot_over <= 0.05 * self.tpot_total + 1e-9
    }
}

/// A window's view: latency percentiles and the queue gauges at its end.
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowView {
    /// p95 TTFT, seconds.
    pub ttft_p95_s: Option<f64>,
    /// p95 TPOT, seconds.
    pub tpot_p95_s: Option<f64>,
    /// Queued requests at the window's end.
    pub queued: f64,
    /// Running requests at the window's end.
    pub running: f64,
}

/// Collects everything the fleet does.
#[derive(Debug)]
pub struct Recorder {
    slots: Vec<Slot>,
    now_second: u64,
    ttft_target_s: f64,
    tpot_target_s: f64,
    /// Per-minute ground truth.
    pub minutes: Vec<Minute>,
    /// Requests completed (all).
    pub completed: f64,
    /// Requests completed within both targets.
    pub completed_ok: f64,
    /// Output tokens of requests completed within both targets.
    pub goodput_tokens: f64,
    /// Output tokens generated.
    pub served_tokens: f64,
    /// Requests rejected (gateway deadline passed with no replica).
    pub rejected: f64,
    /// Preemptions (requests).
    pub preemptions: f64,
    /// The gateway's counters, as its `/metrics` exports them.
    pub exposition: Exposition,
}

impl Recorder {
    /// An empty recorder scoring against the given targets.
    pub fn new(ttft_target_s: f64, tpot_target_s: f64) -> Self {
        Self {
            slots: vec![
                Slot {
                    second: u64::MAX,
                    ..Slot::default()
                };
                RING_S
            ],
            now_second: 0,
            ttft_target_s,
            tpot_target_s,
            minutes: Vec::new(),
            completed: 0.0,
            completed_ok: 0.0,
            goodput_tokens: 0.0,
            served_tokens: 0.0,
            rejected: 0.0,
            preemptions: 0.0,
            exposition: Exposition::default(),
        }
    }

    /// Moves the clock; a new second starts a fresh slot.
    pub fn set_time(&mut self, t_s: f64) {
        let second = t_s.max(0.0) as u64;
        self.now_second = second;
        self.exposition.start_second(second);
        let slot = &mut self.slots[second as usize % RING_S];
        if slot.second != second {
            let (ttft, tpot) = (
                std::mem::take(&mut slot.ttft),
                std::mem::take(&mut slot.tpot),
            );
            *slot = Slot {
                second,
                ttft,
                tpot,
                ..Slot::default()
            };
            slot.ttft.clear();
            slot.tpot.clear();
        }
    }

    fn slot(&mut self) -> &mut Slot {
        &mut self.slots[self.now_second as usize % RING_S]
    }

    fn minute(&mut self, t_s: f64) -> &mut Minute {
        let index = (t_s.max(0.0) / 60.0) as usize;
        if self.minutes.len() <= index {
            self.minutes.resize(index + 1, Minute::default());
        }
        &mut self.minutes[index]
    }

    /// Requests arriving at the gateway.
    pub fn arrived(&mut self, requests: f64, prompt_tokens: f64) {
        self.exposition.now.arrivals += requests;
        self.exposition.now.arrival_prompt_tokens += prompt_tokens;
    }

    /// Output tokens generated.
    pub fn served(&mut self, tokens: f64) {
        self.served_tokens += tokens;
        self.exposition.now.generation_tokens += tokens;
    }

    /// Output tokens of batch lines generated: counted apart, in none of the interactive
    /// figures (throughput, goodput, latency, the minutes' SLO).
    pub fn batch_served(&mut self, tokens: f64) {
        self.exposition.now.batch_tokens += tokens;
    }

    /// First tokens of `weight` requests at `t_s` after `ttft_s`.
    pub fn first_token(&mut self, t_s: f64, ttft_s: f64, weight: f64) {
        self.slot().ttft.add(ttft_s, weight);
        self.exposition.now.first_token(ttft_s, weight);
        let over = if ttft_s > self.ttft_target_s {
            weight
        } else {
            0.0
        };
        let minute = self.minute(t_s);
        minute.ttft_total += weight;
        minute.ttft_over += over;
    }

    /// `weight` requests finished at `t_s` with `tpot_s`; `ok` of them met both targets.
    pub fn completed(&mut self, t_s: f64, tpot_s: f64, weight: f64, ok: f64, output_tokens: f64) {
        let slot = self.slot();
        slot.tpot.add(tpot_s, weight);
        self.exposition.now.finished(tpot_s, weight);
        let over = if tpot_s > self.tpot_target_s {
            weight
        } else {
            0.0
        };
        let minute = self.minute(t_s);
        minute.tpot_total += weight;
        minute.tpot_over += over;
        self.completed += weight;
        self.completed_ok += ok;
        self.goodput_tokens += ok / weight.max(1e-12) * output_tokens;
    }

    /// Requests dropped without service: they count against every target.
    pub fn rejected(&mut self, t_s: f64, weight: f64) {
        self.rejected += weight;
        self.completed += weight;
        let minute = self.minute(t_s);
        minute.ttft_total += weight;
        minute.ttft_over += weight;
    }

    /// Requests preempted.
    pub fn preempted(&mut self, weight: f64) {
        self.preemptions += weight;
    }

    /// Queue gauges at this second.
    pub fn gauges(&mut self, queued: f64, running: f64) {
        let slot = self.slot();
        slot.queued = queued;
        slot.running = running;
        self.exposition.now.queued = queued;
        self.exposition.now.running = running;
    }

    /// The window of `len_s` seconds ending `delay_s` before now (what a scrape sees).
    pub fn window(&self, len_s: u64, delay_s: u64) -> WindowView {
        let end = self.now_second.saturating_sub(delay_s);
        let start = end.saturating_sub(len_s.max(1) - 1);
        let (mut ttft, mut tpot) = (Histogram::default(), Histogram::default());
        for second in start..=end {
            let slot = &self.slots[second as usize % RING_S];
            if slot.second != second {
                continue;
            }
            ttft.merge(&slot.ttft);
            tpot.merge(&slot.tpot);
        }
        let last = &self.slots[end as usize % RING_S];
        WindowView {
            ttft_p95_s: ttft.quantile(0.95),
            tpot_p95_s: tpot.quantile(0.95),
            queued: if last.second == end { last.queued } else { 0.0 },
            running: if last.second == end {
                last.running
            } else {
                0.0
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_within_a_bucket() {
        let mut h = Histogram::default();
        for i in 1..=100 {
            h.add(f64::from(i) * 0.01, 1.0);
        }
        let p95 = h.quantile(0.95).expect("a quantile of 100 samples");
        assert!((p95 - 0.95).abs() < 0.05, "{p95}");
    }

    #[test]
    fn minute_met_uses_the_five_percent_tail() {
        let mut r = Recorder::new(1.0, 0.1);
        r.set_time(1.0);
        r.first_token(1.0, 0.5, 96.0);
        r.first_token(1.0, 2.0, 4.0);
        assert!(r.minutes[0].met());
        r.first_token(1.0, 2.0, 2.0);
        assert!(!r.minutes[0].met());
    }
}
