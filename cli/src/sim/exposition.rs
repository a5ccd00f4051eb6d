//! The simulated gateway's `/metrics`: cumulative counters, queue gauges and latency
//! histograms on the real gateway's bucket bounds, scraped with the scrape delay into the
//! [`ScrapeRound`] the operator's scaling loop reads, through the same readings a real scrape
//! goes through (metric names to logical series, bucket labels to bounds).
//!
//! Samples are built as parsed ones rather than rendered to text and parsed back: the project
//! has one Prometheus text parser (`tokenscale_common::prom_text`) and one writer
//! (`tokenscale_common::exposition`, which the gateway, engine and operator render with), and
//! the text would only round-trip the same numbers. The bucket labels are spelled by that
//! writer's rule for the gateway's histograms ([`LeFormat::Shortest`]). The counts here are
//! weights (a simulated request can be a fraction), which the writer's integer histogram
//! cannot hold.

use std::collections::VecDeque;

use futures::FutureExt;
use tokenscale_common::exposition::LeFormat;
use tokenscale_common::metrics::{LABEL_MODEL_NAME, gateway};
use tokenscale_common::prom_text::Sample;
use tokenscale_scaling::metrics_source::readings::{Gauges, Reading, read};
use tokenscale_scaling::metrics_source::{ScrapeRound, ScrapeTargets, TargetKind};

use super::targets::SimTargets;

/// The served model name the simulated gateway labels its series with.
pub const MODEL: &str = "sim";

/// Per-second snapshots kept for the scrape delay; a longer delay reads the oldest.
const MAX_DELAY_S: usize = 300;

/// A histogram as the gateway exports it: a count per bucket (not cumulative), `+Inf` last.
#[derive(Debug, Clone)]
struct Buckets {
    bounds_s: &'static [f64],
    /// Each bucket's `le` label, `+Inf` last: written once (shared by the per-second
    /// snapshots), not at every scrape.
    les: std::sync::Arc<[String]>,
    counts: Vec<f64>,
}

impl Buckets {
    fn new(bounds_s: &'static [f64]) -> Self {
        let les = bounds_s
            .iter()
            .map(|&bound| LeFormat::Shortest.label(bound))
            .chain(["+Inf".to_string()])
            .collect();
        Self {
            bounds_s,
            les,
            counts: vec![0.0; bounds_s.len() + 1],
        }
    }

    fn add(&mut self, value_s: f64, weight: f64) {
        // The first bucket whose bound is at least the value (`le`).
        let index = self.bounds_s.partition_point(|&le| le < value_s);
        self.counts[index] += weight;
    }

    /// `_bucket` samples of histogram `name`, cumulative as exported.
    fn samples(&self, name: &str, out: &mut Vec<Sample>) {
        let name = format!("{name}_bucket");
        let mut total = 0.0;
        for (count, le) in self.counts.iter().zip(self.les.iter()) {
            total += count;
            out.push(sample(&name, Some(("le", le.clone())), total));
        }
    }
}

/// Everything the gateway counts for the model, at one instant.
#[derive(Debug, Clone)]
pub struct Counters {
    /// Requests arrived (offered load).
    pub arrivals: f64,
    /// Prompt tokens of those arrivals.
    pub arrival_prompt_tokens: f64,
    /// Requests finished.
    pub requests: f64,
    /// Output tokens streamed to interactive requests.
    pub generation_tokens: f64,
    /// Output tokens of batch lines.
    pub batch_tokens: f64,
    /// Requests waiting (gateway and engine queues), now.
    pub queued: f64,
    /// Requests running in engines, now.
    pub running: f64,
    ttft: Buckets,
    tpot: Buckets,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            arrivals: 0.0,
            arrival_prompt_tokens: 0.0,
            requests: 0.0,
            generation_tokens: 0.0,
            batch_tokens: 0.0,
            queued: 0.0,
            running: 0.0,
            ttft: Buckets::new(gateway::TTFT_BUCKETS_S),
            tpot: Buckets::new(gateway::TPOT_BUCKETS_S),
        }
    }
}

impl Counters {
    /// A first token after `ttft_s`, for `weight` requests.
    pub fn first_token(&mut self, ttft_s: f64, weight: f64) {
        self.ttft.add(ttft_s, weight);
    }

    /// `weight` requests finished at `tpot_s` per output token.
    pub fn finished(&mut self, tpot_s: f64, weight: f64) {
        self.tpot.add(tpot_s, weight);
        self.requests += weight;
    }
}

/// The Batch API gauges the gateway exports (shared state, not delayed by the scrape).
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchGauges {
    /// Output tokens running batch jobs have left.
    pub backlog_tokens: f64,
    /// Output tokens/s that finish every running batch by its deadline.
    pub required_tokens_per_s: f64,
}

/// The gateway's counters now and at the start of each recent second.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    /// Counters now.
    pub now: Counters,
    /// `(second, counters at its start)`, oldest first.
    past: VecDeque<(u64, Counters)>,
}

impl Exposition {
    /// Second `second` starts: what was counted so far is what a scrape at its start sees.
    pub fn start_second(&mut self, second: u64) {
        if self.past.back().is_some_and(|(last, _)| *last >= second) {
            return; // another tick of a second already started
        }
        self.past.push_back((second, self.now.clone()));
        if self.past.len() > MAX_DELAY_S + 1 {
            self.past.pop_front();
        }
    }

    /// A scrape at second `now_second` whose answer is `delay_s` old: the counters through
    /// the end of second `now_second − delay_s`, plus the batch gauges now. Two targets, as
    /// the operator scrapes them, listed by [`SimTargets`]: the gateway, and the engines' running
    /// requests as one.
    pub fn scrape(&self, now_second: u64, delay_s: u64, batch: BatchGauges) -> ScrapeRound {
        let counters = if delay_s == 0 {
            &self.now
        } else {
            let start = (now_second + 1).saturating_sub(delay_s);
            self.past
                .iter()
                .rev()
                .find(|(second, _)| *second <= start)
                .or(self.past.front())
                .map_or(&self.now, |(_, c)| c)
        };
        let samples = gateway_samples(counters, batch);
        let engines = Reading {
            gauges: Gauges {
                running: counters.running,
                ..Gauges::default()
            },
            ..Reading::default()
        };
        // The listing is ready at once (nothing to look up): polled once, never awaited.
        let targets = SimTargets
            .scrape_targets(&SimTargets::model(MODEL))
            .now_or_never()
            .unwrap_or_default();
        let readings = targets
            .into_iter()
            .map(|target| {
                let reading = match target.kind {
                    TargetKind::Gateway => read(TargetKind::Gateway, &samples, MODEL),
                    TargetKind::Engine => engines.clone(),
                };
                (target.name, target.kind, reading)
            })
            .collect();
        ScrapeRound {
            readings,
            failed: 0,
        }
    }
}

fn sample(name: &str, label: Option<(&str, String)>, value: f64) -> Sample {
    let mut labels = vec![(LABEL_MODEL_NAME.to_string(), MODEL.to_string())];
    labels.extend(label.map(|(k, v)| (k.to_string(), v)));
    Sample {
        name: name.to_string(),
        labels,
        value,
    }
}

/// The gateway's series for the model, as a scrape parses them.
fn gateway_samples(c: &Counters, batch: BatchGauges) -> Vec<Sample> {
    let mut out = vec![
        sample(gateway::ARRIVALS_TOTAL, None, c.arrivals),
        sample(
            gateway::ARRIVAL_PROMPT_TOKENS_TOTAL,
            None,
            c.arrival_prompt_tokens,
        ),
        sample(gateway::REQUESTS_TOTAL, None, c.requests),
        sample(gateway::GENERATION_TOKENS_TOTAL, None, c.generation_tokens),
        sample(gateway::BATCH_GENERATION_TOKENS_TOTAL, None, c.batch_tokens),
        // All waiting requests as the gateway's queue: the engines' queues are not modelled
        // apart, and the scaling loop adds the two anyway.
        sample(gateway::QUEUE_DEPTH, None, c.queued),
        sample(gateway::IN_FLIGHT_REQUESTS, None, c.running),
        sample(
            gateway::BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND,
            None,
            batch.required_tokens_per_s,
        ),
        sample(
            gateway::BATCH_BACKLOG_OUTPUT_TOKENS,
            None,
            batch.backlog_tokens,
        ),
    ];
    c.ttft
        .samples(gateway::TIME_TO_FIRST_TOKEN_SECONDS, &mut out);
    c.tpot
        .samples(gateway::TIME_PER_OUTPUT_TOKEN_SECONDS, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_reads_the_counters_as_they_were_delay_seconds_ago() {
        let mut e = Exposition::default();
        for second in 0..10u64 {
            e.start_second(second);
            e.now.arrivals += 2.0;
            e.now.first_token(0.02, 2.0);
        }
        let round = e.scrape(9, 3, BatchGauges::default());
        let (_, kind, gw) = &round.readings[0];
        assert_eq!(*kind, TargetKind::Gateway);
        // Through the end of second 6: seven seconds of two arrivals.
        let arrivals = gw.counters.get("gateway.arrivals").copied();
        assert_eq!(arrivals, Some(14.0));
        let bucket = gw.counters.get("gateway.ttft|le=0.02").copied();
        assert_eq!(bucket, Some(14.0), "0.02 s counts in its own bucket (le)");
        let now = e.scrape(9, 0, BatchGauges::default());
        assert_eq!(
            now.readings[0].2.counters.get("gateway.arrivals"),
            Some(&20.0)
        );
    }
}
