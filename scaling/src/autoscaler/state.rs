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
    /// Since when some replicas have been pending with none becoming ready (`None`: none
    /// pending). During a long ramp replicas are always pending, but each arrives in time.
    pub(crate) pending_since_s: Option<f64>,
    /// Requests queued at the previous call: a shrinking queue means the replicas have spare
    /// capacity, so a broken SLO then comes from the backlog, not from the knee.
    pub(crate) last_queued_requests: Option<u64>,
    /// Offered demand `(time_s, tokens_per_s)` of recent periods, for the trend.
    pub(crate) demand_history: VecDeque<(f64, f64)>,
    /// Short-window throughput per ready replica `(time_s, tokens_per_s)` of recent periods:
    /// the load at the worst moment of the window a p95 covers.
    pub(crate) burst_history: VecDeque<(f64, f64)>,
    /// The scale-in stabilisation window now in force, seconds (`None`: the spec's). Grows
    /// when load came back soon after a scale-in, shrinks back while it stays down.
    pub scale_in_window_s: Option<f64>,
    /// When the fleet's last run of scale-in steps began, and the count it began from (load
    /// that comes back undoes it; see `oscillation`).
    pub last_scale_in: Option<(f64, u32)>,
    /// When the scale-in window last changed.
    pub(crate) scale_in_window_changed_s: Option<f64>,
    /// The batches' required output tokens/s `(time_s, tokens_per_s)` of recent periods (not
    /// in the snapshot: a new leader sizes for batches on its own readings a startup later).
    pub(crate) batch_required_history: VecDeque<(f64, f64)>,
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

    /// The same state, as if the policy had watched the model since `t_s`: its warm-up hold
    /// (no scale-down within a stable window of first sight, for want of history) is over once
    /// a stable window has passed since then. For state restored from elsewhere, and tests.
    pub fn seen_since(mut self, t_s: f64) -> Self {
        self.first_seen_s = Some(t_s);
        self
    }

    /// Tracks how long the ready count has held steady.
    pub(crate) fn note_ready(&mut self, ready: u32, now_s: f64) {
        if self.ready_count.is_some_and(|before| ready > before) && self.pending_since_s.is_some() {
            self.pending_since_s = Some(now_s);
        }
        if self.ready_count != Some(ready) {
            self.ready_count = Some(ready);
            self.ready_since_s = now_s;
        }
    }

    /// Tracks since when replicas have been pending; returns how long, in seconds.
    pub(crate) fn note_pending(&mut self, pending: u32, now_s: f64) -> f64 {
        if pending == 0 {
            self.pending_since_s = None;
            return 0.0;
        }
        now_s - *self.pending_since_s.get_or_insert(now_s)
    }

    /// Remembers this period's demand and returns its change per second over the last
    /// `window_s` (0 when the two halves disagree, or with too little history). A trend must
    /// show in both halves of the window: the gentler of the two halves' slopes counts, so a
    /// one-off step (already fully in the current demand) is not extrapolated as if it went on.
    pub(crate) fn demand_trend(&mut self, now_s: f64, window_s: f64, tokens_per_s: f64) -> f64 {
        self.demand_history.push_back((now_s, tokens_per_s));
        forget_before(&mut self.demand_history, now_s - window_s);
        let Some(&(first_s, first)) = self.demand_history.front() else {
            return 0.0;
        };
        if now_s - first_s < 0.5 * window_s {
            return 0.0;
        }
        let mid_target_s = 0.5 * (first_s + now_s);
        let Some(&(mid_s, mid)) = self.demand_history.iter().min_by(|a, b| {
            (a.0 - mid_target_s)
                .abs()
                .total_cmp(&(b.0 - mid_target_s).abs())
        }) else {
            return 0.0;
        };
        if mid_s <= first_s || mid_s >= now_s {
            return 0.0;
        }
        let older = (mid - first) / (mid_s - first_s);
        let newer = (tokens_per_s - mid) / (now_s - mid_s);
        if older > 0.0 && newer > 0.0 {
            older.min(newer)
        } else if older < 0.0 && newer < 0.0 {
            older.max(newer)
        } else {
            0.0
        }
    }

    /// Remembers this period's short-window throughput per replica and returns the highest
    /// within `window_s`.
    pub(crate) fn note_burst_load(&mut self, now_s: f64, window_s: f64, per_replica: f64) -> f64 {
        if per_replica.is_finite() {
            self.burst_history.push_back((now_s, per_replica));
        }
        forget_before(&mut self.burst_history, now_s - window_s);
        self.burst_history
            .iter()
            .map(|&(_, x)| x)
            .fold(0.0, f64::max)
    }

    /// Remembers this period's required batch rate and returns the lowest within `window_s`:
    /// the rate that has held that long.
    pub(crate) fn sustained_batch_required(
        &mut self,
        now_s: f64,
        window_s: f64,
        tokens_per_s: f64,
    ) -> f64 {
        self.batch_required_history.push_back((now_s, tokens_per_s));
        forget_before(&mut self.batch_required_history, now_s - window_s);
        self.batch_required_history
            .iter()
            .map(|&(_, r)| r)
            .fold(tokens_per_s, f64::min)
    }

    /// Remembers a raw recommendation and returns the highest one within `window_s`.
    pub(crate) fn stabilized(&mut self, now_s: f64, window_s: f64, raw: u32) -> u32 {
        self.recommendations.push_back((now_s, raw));
        forget_before(&mut self.recommendations, now_s - window_s);
        self.recommendations
            .iter()
            .map(|&(_, r)| r)
            .max()
            .unwrap_or(raw)
    }
}

/// Drops the samples of a time-ordered window taken before `start_s`.
fn forget_before<T>(samples: &mut VecDeque<(f64, T)>, start_s: f64) {
    while samples.front().is_some_and(|(t, _)| *t < start_s) {
        samples.pop_front();
    }
}
