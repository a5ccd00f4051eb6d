//! One model's metrics memory: accumulated totals, their history, the latest gauges and
//! per-replica loads; and the reduction of all that to the policy's view for one period.

use std::collections::BTreeMap;

use tokenscale_common::engines::{Absent, Signal};

use super::caps;
use super::readings::{BatchGauges, Gauges, Reading, TargetKind, keys};
use super::start::EngineStart;
use super::window::{Accumulator, History};
use crate::autoscaler::{
    BatchDemand, ConcurrencyCap, Demand, DemandSource, ReplicaLoad, WindowedRate,
};

/// The policy-facing part of one period's observations (replica counts come from the scale
/// target, not from metrics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsView {
    /// Demand and throughput; `None` when metrics are missing or stale.
    pub demand: Option<Demand>,
    /// p95 time to first token over the stable window, seconds.
    pub ttft_p95_s: Option<f64>,
    /// p95 time per output token over the stable window, seconds.
    pub tpot_p95_s: Option<f64>,
    /// Per-replica loads, by pod name.
    pub replica_loads: Vec<ReplicaLoad>,
    /// The Hub commits the replicas serve (`hf://` sources), sorted, each once.
    pub revisions: Vec<String>,
    /// Signals the policy would use that the replicas' engines do not export, in words
    /// (sorted, each once): the policy decided without them.
    pub missing: Vec<String>,
    /// Each replica's own start by phase, by pod name, for the engines that export one.
    pub engine_starts: BTreeMap<String, EngineStart>,
    /// The replicas' concurrency caps as of the last scrape (the gateway's per-replica caps
    /// when it sets any, else the engines' own limits); `None` when none reports one.
    pub concurrency_cap: Option<ConcurrencyCap>,
}

/// What one scrape round of one model found: each reachable target's reading.
#[derive(Debug, Clone, Default)]
pub struct ScrapeRound {
    /// `(target name, kind, reading)` for each target that answered.
    pub readings: Vec<(String, TargetKind, Reading)>,
    /// Targets that did not answer.
    pub failed: usize,
}

#[derive(Debug, Clone, Default)]
struct ReplicaMemory {
    last_tokens: Option<(f64, f64)>,
    tokens_per_s: f64,
    gauges: Gauges,
    revision: Option<String>,
    absent: Vec<Absent>,
    start: Option<EngineStart>,
}

/// Metrics memory of one model.
#[derive(Debug, Clone, Default)]
pub struct ModelMetrics {
    accumulator: Accumulator,
    history: History,
    gauges_total: Gauges,
    /// The engines' part of `gauges_total.waiting` (the rest is the gateway's queue).
    engine_waiting: f64,
    batch: BatchGauges,
    gateway_seen: bool,
    cap: Option<ConcurrencyCap>,
    last_success_s: Option<f64>,
    replicas: BTreeMap<String, ReplicaMemory>,
}

impl ModelMetrics {
    /// Folds one scrape round taken at `t_s` in; keeps history for `keep_s` seconds.
    pub fn record(&mut self, t_s: f64, round: &ScrapeRound, keep_s: f64) {
        if round.readings.is_empty() {
            return; // nothing answered: the view goes stale rather than reading zero demand
        }
        let mut gauges = Gauges::default();
        let (mut engine_waiting, mut batch) = (0.0, BatchGauges::default());
        let mut alive = Vec::new();
        for (target, kind, reading) in &round.readings {
            self.accumulator.add(target, &reading.counters);
            gauges.waiting += reading.gauges.waiting;
            // The gateway's in-flight requests are the engines' running ones: count once.
            if *kind == TargetKind::Engine {
                gauges.running += reading.gauges.running;
                engine_waiting += reading.gauges.waiting;
                self.note_replica(target, t_s, reading);
            } else {
                self.gateway_seen = true;
                batch.merge(&reading.batch);
            }
            alive.push(target.clone());
        }
        self.accumulator.retain_targets(&alive);
        self.replicas.retain(|name, _| alive.contains(name));
        self.gauges_total = gauges;
        self.engine_waiting = engine_waiting;
        self.batch = batch;
        self.cap =
            caps::model(round.readings.iter().filter_map(|(_, kind, reading)| {
                Some((*kind == TargetKind::Gateway, reading.cap?))
            }));
        self.last_success_s = Some(t_s);
        self.history.push(self.accumulator.snapshot(t_s), keep_s);
    }

    fn note_replica(&mut self, target: &str, t_s: f64, reading: &Reading) {
        let memory = self.replicas.entry(target.to_string()).or_default();
        let tokens = reading
            .counters
            .get(keys::ENGINE_TOKENS)
            .copied()
            .unwrap_or(0.0);
        if let Some((t0, tokens0)) = memory.last_tokens
            && t_s > t0
        {
            // A restart (counter went down) counts from zero.
            let increase = if tokens >= tokens0 {
                tokens - tokens0
            } else {
                tokens
            };
            memory.tokens_per_s = increase / (t_s - t0);
        }
        memory.last_tokens = Some((t_s, tokens));
        memory.gauges = reading.gauges;
        memory.revision = reading.revision.clone();
        memory.absent = reading.absent.clone();
        memory.start = reading.start;
    }

    /// What the replicas' engines lack that the policy would read: their load gauges always;
    /// tokens, finished requests and latency only when no gateway measures them instead.
    /// Prompt tokens are never read.
    fn missing(&self) -> Vec<String> {
        let needed = |signal: Signal| match signal {
            Signal::RunningRequests | Signal::WaitingRequests | Signal::KvCacheUsage => true,
            Signal::PromptTokens => false,
            Signal::GeneratedTokens
            | Signal::FinishedRequests
            | Signal::TimeToFirstToken
            | Signal::InterTokenLatency => !self.gateway_seen,
        };
        let mut missing: Vec<String> = self
            .replicas
            .values()
            .flat_map(|m| &m.absent)
            .filter(|a| needed(a.signal))
            .map(ToString::to_string)
            .collect();
        missing.sort();
        missing.dedup();
        missing
    }

    /// Mean estimated prompt tokens of the requests that arrived over the last `window_s`
    /// (the gateway's arrival counters); `None` without arrivals or the prompt counter.
    pub fn prompt_tokens_per_arrival(&self, window_s: f64) -> Option<f64> {
        let h = &self.history;
        if !h.has(keys::GW_ARRIVAL_PROMPT_TOKENS) {
            return None;
        }
        let prompt = h.increase(keys::GW_ARRIVAL_PROMPT_TOKENS, window_s)?;
        let arrivals = h.increase(keys::GW_ARRIVALS, window_s)?;
        (arrivals > 0.0 && prompt >= 0.0).then(|| prompt / arrivals)
    }

    /// The policy's view at `now_s`. Stale (nothing answered for `stale_after_s`) or too
    /// little history gives `demand: None`, so the policy holds instead of scaling blind.
    pub fn view(&self, now_s: f64, stable_s: f64, panic_s: f64, stale_after_s: f64) -> MetricsView {
        let loads = self
            .replicas
            .iter()
            .map(|(name, m)| ReplicaLoad {
                name: name.clone(),
                output_tokens_per_s: m.tokens_per_s,
                running_requests: m.gauges.running.max(0.0) as u64,
                waiting_requests: m.gauges.waiting.max(0.0) as u64,
                kv_cache_usage: m.gauges.kv_cache_usage,
            })
            .collect();
        let mut revisions: Vec<String> = self
            .replicas
            .values()
            .filter_map(|m| m.revision.clone())
            .collect();
        revisions.sort();
        revisions.dedup();
        let missing = self.missing();
        let engine_starts = self
            .replicas
            .iter()
            .filter_map(|(name, m)| Some((name.clone(), m.start?)))
            .collect();
        let fresh = self
            .last_success_s
            .is_some_and(|t| now_s - t <= stale_after_s);
        if !fresh || self.history.len() < 2 {
            return MetricsView {
                replica_loads: loads,
                revisions,
                missing,
                engine_starts,
                concurrency_cap: self.cap,
                ..MetricsView::default()
            };
        }
        // The gateway sees what users feel (queueing included): prefer it when present.
        let (tokens, requests, ttft, tpot) = if self.gateway_seen {
            (
                keys::GW_TOKENS,
                keys::GW_REQUESTS,
                keys::GW_TTFT,
                keys::GW_TPOT,
            )
        } else {
            (
                keys::ENGINE_TOKENS,
                keys::ENGINE_REQUESTS,
                keys::ENGINE_TTFT,
                keys::ENGINE_TPOT,
            )
        };
        let h = &self.history;
        let windowed = |key| WindowedRate {
            stable: h.rate(key, stable_s).unwrap_or(0.0),
            panic: h.rate(key, panic_s).unwrap_or(0.0),
        };
        let completed = h.increase(requests, stable_s).unwrap_or(0.0);
        let generated = h.increase(tokens, stable_s).unwrap_or(0.0);
        // Arrivals as the gateway counts them (admitted, queued, or refused for capacity) are
        // the offered load. Without them (no gateway, or one too old to count arrivals),
        // completions stand in: capped by the capacity that exists, a growing queue shows up
        // only in `queued_requests`.
        let (arrivals, source) = if h.has(keys::GW_ARRIVALS) {
            (keys::GW_ARRIVALS, DemandSource::GatewayArrivals)
        } else {
            (requests, DemandSource::EngineCompletions)
        };
        // Batch lines are in none of the gateway's interactive series (tokens, requests,
        // arrivals, latency), but the engines count them among their waiting and running
        // requests: those are taken off, so batch work never reads as interactive demand.
        let (queued, running) = interactive_counts(
            self.gauges_total,
            self.engine_waiting,
            self.batch.in_flight_requests,
        );
        let demand = Demand {
            output_tokens_per_s: windowed(tokens),
            arrival_requests_per_s: windowed(arrivals),
            mean_output_tokens_per_request: (completed > 0.0).then(|| generated / completed),
            queued_requests: queued.max(0.0) as u64,
            running_requests: running.max(0.0) as u64,
            completed_requests: completed as u64,
            source,
            batch: BatchDemand {
                required_output_tokens_per_s: self.batch.required_output_tokens_per_s.max(0.0),
                backlog_output_tokens: self.batch.backlog_output_tokens.max(0.0),
                output_tokens_per_s: windowed(keys::GW_BATCH_TOKENS),
                in_flight_requests: self.batch.in_flight_requests.max(0.0) as u64,
            },
        };
        MetricsView {
            demand: Some(demand),
            ttft_p95_s: h.quantile(ttft, 0.95, stable_s),
            tpot_p95_s: h.quantile(tpot, 0.95, stable_s),
            replica_loads: loads,
            revisions,
            missing,
            engine_starts,
            concurrency_cap: self.cap,
        }
    }
}

/// Interactive requests `(waiting, running)` from the totals, of which `engine_waiting` wait in
/// the engines (the rest in the gateway's queue), when the gateway has `batch_in_flight` batch
/// lines at the engines. They come off the engines' waiting first (engines schedule
/// interactive requests first, so a line left waiting is most likely a batch one), then off
/// their running.
fn interactive_counts(totals: Gauges, engine_waiting: f64, batch_in_flight: f64) -> (f64, f64) {
    let batch = batch_in_flight.max(0.0);
    let off_waiting = batch.min(engine_waiting.max(0.0));
    let off_running = (batch - off_waiting).min(totals.running.max(0.0));
    (totals.waiting - off_waiting, totals.running - off_running)
}

#[cfg(test)]
mod tests;
