//! What the policy remembers between periods: the learned capacity, recent recommendations
//! (scale-down hysteresis), the panic deadline and idle tracking. Owned by the caller, one per
//! model; the operator keeps it in memory (losing it on restart only resets the learning).

use std::collections::VecDeque;

use super::spec::PolicySpec;

/// Memory of the policy for one model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyState {
    /// Learned output tokens/s one replica sustains within the SLO; `None` until known.
    pub capacity_tokens_per_s_per_replica: Option<f64>,
    /// Per-replica throughput at which the SLO last broke under real load: the knee is at or
    /// below it, so probing upward stops short of it.
    pub capacity_ceiling_tokens_per_s: Option<f64>,
    /// Panic mode lasts until this time (seconds, the caller's clock).
    pub panic_until_s: Option<f64>,
    /// When demand was last seen to stop entirely (for scale to zero).
    pub idle_since_s: Option<f64>,
    /// When the replica count last changed by a decision.
    pub last_scale_s: Option<f64>,
    /// First call: no scale-down until a stabilisation window of observations (a restarted
    /// operator must not act on one sample).
    pub(crate) first_seen_s: Option<f64>,
    /// Ready replicas at the previous call, and since when that count holds: throughput per
    /// replica is only trusted once the stable window saw one steady count.
    pub(crate) ready_count: Option<u32>,
    pub(crate) ready_since_s: f64,
    /// Raw recommendations `(time_s, replicas)` within the scale-down stabilisation window.
    pub(crate) recommendations: VecDeque<(f64, u32)>,
    /// Last known mean output tokens per request (survives windows with no completions).
    pub(crate) mean_output_tokens: Option<f64>,
    /// Offered demand `(time_s, tokens_per_s)` of recent periods, for the trend.
    pub(crate) demand_history: VecDeque<(f64, f64)>,
}

impl PolicyState {
    /// Fresh state, capacity seeded from the spec's per-GPU hint when it has one.
    pub fn new(spec: &PolicySpec) -> Self {
        Self {
            capacity_tokens_per_s_per_replica: spec
                .initial_tokens_per_s_per_gpu
                .map(|per_gpu| per_gpu * f64::from(spec.gpus_per_replica.max(1))),
            ..Self::default()
        }
    }

    /// Tracks how long the ready count has held steady.
    pub(crate) fn note_ready(&mut self, ready: u32, now_s: f64) {
        if self.ready_count != Some(ready) {
            self.ready_count = Some(ready);
            self.ready_since_s = now_s;
        }
    }

    /// Remembers this period's demand and returns its rise per second over the last
    /// `window_s` (0 when flat or falling, or with too little history).
    pub(crate) fn demand_trend(&mut self, now_s: f64, window_s: f64, tokens_per_s: f64) -> f64 {
        self.demand_history.push_back((now_s, tokens_per_s));
        while self
            .demand_history
            .front()
            .is_some_and(|&(t, _)| t < now_s - window_s)
        {
            self.demand_history.pop_front();
        }
        match self.demand_history.front() {
            Some(&(t, then)) if now_s - t >= 0.5 * window_s => {
                ((tokens_per_s - then) / (now_s - t)).max(0.0)
            }
            _ => 0.0,
        }
    }

    /// Remembers a raw recommendation and returns the highest one within `window_s`.
    pub(crate) fn stabilized(&mut self, now_s: f64, window_s: f64, raw: u32) -> u32 {
        self.recommendations.push_back((now_s, raw));
        while self
            .recommendations
            .front()
            .is_some_and(|&(t, _)| t < now_s - window_s)
        {
            self.recommendations.pop_front();
        }
        self.recommendations
            .iter()
            .map(|&(_, r)| r)
            .max()
            .unwrap_or(raw)
    }
}
