//! What the policy remembers between periods: the learned capacity, recent recommendations
//! (scale-down hysteresis), the panic deadline and idle tracking. Owned by the caller, one per
//! model; the operator keeps it in memory (losing it on restart only resets the learning).

use std::collections::VecDeque;

use super::foresight::Foresight;
use super::snapshot::Clocks;
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
    /// The demand history foresight learns recurring demand from (in the snapshot).
    pub(crate) foresight: Foresight,
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

    /// Tells the policy the wall clock of this period, so a predicted rise is named by its
    /// time of day (`pre-warming for the predicted rise at HH:MM`).
    pub fn note_wall_clock(&mut self, clocks: Clocks) {
        self.foresight.wall_offset_s = Some(clocks.unix_s() - clocks.now_s);
    }

    /// The period of the recurring demand foresight found, seconds, if any.
    pub fn recurring_period_s(&self) -> Option<f64> {
        self.foresight.period_s()
    }

    /// This period's demand against the last `window_s` of it: its change per second (0 when
    /// the two halves disagree, or with too little history). A trend must show in both halves
    /// of the window: the gentler of the two halves' slopes counts, so a one-off step (already
    /// fully in the current demand) is not extrapolated as if it went on.
    pub(crate) fn demand_trend(&self, now_s: f64, window_s: f64, tokens_per_s: f64) -> f64 {
        let history: Vec<(f64, f64)> = window_with(
            &self.demand_history,
            Some((now_s, tokens_per_s)),
            now_s - window_s,
        )
        .collect();
        let Some(&(first_s, first)) = history.first() else {
            return 0.0;
        };
        if now_s - first_s < 0.5 * window_s {
            return 0.0;
        }
        let mid_target_s = 0.5 * (first_s + now_s);
        let Some(&(mid_s, mid)) = history.iter().min_by(|a, b| {
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

    /// The highest short-window throughput per replica within `window_s`, this period's
    /// included.
    pub(crate) fn burst_load(&self, now_s: f64, window_s: f64, per_replica: f64) -> f64 {
        let sample = per_replica.is_finite().then_some((now_s, per_replica));
        window_with(&self.burst_history, sample, now_s - window_s)
            .map(|(_, x)| x)
            .fold(0.0, f64::max)
    }

    /// The lowest required batch rate within `window_s`, this period's included: the rate
    /// that has held that long.
    pub(crate) fn sustained_batch_required(
        &self,
        now_s: f64,
        window_s: f64,
        tokens_per_s: f64,
    ) -> f64 {
        window_with(
            &self.batch_required_history,
            Some((now_s, tokens_per_s)),
            now_s - window_s,
        )
        .map(|(_, r)| r)
        .fold(tokens_per_s, f64::min)
    }

    /// The highest raw recommendation within `window_s`, this period's `raw` included.
    pub(crate) fn stabilized(&self, now_s: f64, window_s: f64, raw: u32) -> u32 {
        window_with(&self.recommendations, Some((now_s, raw)), now_s - window_s)
            .map(|(_, r)| r)
            .max()
            .unwrap_or(raw)
    }

    /// Keeps this period's offered demand for the trend.
    pub(crate) fn record_demand(&mut self, now_s: f64, window_s: f64, tokens_per_s: f64) {
        record(
            &mut self.demand_history,
            Some((now_s, tokens_per_s)),
            now_s - window_s,
        );
    }

    /// Keeps this period's short-window throughput per replica (when it is a number).
    pub(crate) fn record_burst_load(&mut self, now_s: f64, window_s: f64, per_replica: f64) {
        let sample = per_replica.is_finite().then_some((now_s, per_replica));
        record(&mut self.burst_history, sample, now_s - window_s);
    }

    /// Keeps this period's required batch rate.
    pub(crate) fn record_batch_required(&mut self, now_s: f64, window_s: f64, tokens_per_s: f64) {
        record(
            &mut self.batch_required_history,
            Some((now_s, tokens_per_s)),
            now_s - window_s,
        );
    }

    /// Keeps this period's raw recommendation for the scale-down window.
    pub(crate) fn record_recommendation(&mut self, now_s: f64, window_s: f64, raw: u32) {
        record(
            &mut self.recommendations,
            Some((now_s, raw)),
            now_s - window_s,
        );
    }
}

/// A time-ordered window as it is once `sample` joins it and the samples before `start_s`
/// leave it (the leading run, as [`record`] drops them), without changing it.
fn window_with<T: Copy>(
    samples: &VecDeque<(f64, T)>,
    sample: Option<(f64, T)>,
    start_s: f64,
) -> impl Iterator<Item = (f64, T)> + '_ {
    samples
        .iter()
        .copied()
        .chain(sample)
        .skip_while(move |(t, _)| *t < start_s)
}

/// Adds `sample` to a time-ordered window and drops the samples taken before `start_s`.
fn record<T>(samples: &mut VecDeque<(f64, T)>, sample: Option<(f64, T)>, start_s: f64) {
    samples.extend(sample);
    forget_before(samples, start_s);
}

/// Drops the samples of a time-ordered window taken before `start_s`.
fn forget_before<T>(samples: &mut VecDeque<(f64, T)>, start_s: f64) {
    while samples.front().is_some_and(|(t, _)| *t < start_s) {
        samples.pop_front();
    }
}
