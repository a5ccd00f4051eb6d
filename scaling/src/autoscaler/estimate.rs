//! The pipeline's first stage, `estimate`: from this period's observations and the policy's
//! memory (read, never written), the replica tracking, what capacity the period teaches,
//! and the demand over the stable and burst windows (their trend and the backlog included)
//! in tokens/s and in replicas at the target utilisation.

use super::capacity::{Learned, learn};
use super::observations::{Demand, DemandSource, Observations};
use super::spec::PolicySpec;
use super::state::PolicyState;
use super::zero::idle_since;

/// A trend must lift the planned demand by more than this share to count (noise floor).
const TREND_NOISE_SHARE: f64 = 0.05;

/// Ready and pending replicas over time, as of this period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Tracking {
    /// Ready replicas now.
    pub ready_count: u32,
    /// Since when that ready count holds.
    pub ready_since_s: f64,
    /// Since when some replicas have been pending with none becoming ready.
    pub pending_since_s: Option<f64>,
    /// How long that is, seconds (0 with none pending).
    pub pending_for_s: f64,
    /// When the policy first saw the model.
    pub first_seen_s: f64,
}

/// Demand over both windows, and what it asks of the fleet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Need {
    /// Stable-window demand plus its rising trend carried over the planning lead, backlog in.
    pub stable_tokens_per_s: f64,
    /// Burst-window demand, backlog in.
    pub panic_tokens_per_s: f64,
    pub stable_replicas: u32,
    pub panic_replicas: u32,
    /// The same without the backlog's drain: the level demand asks for.
    pub stable_level_replicas: u32,
    pub panic_level_replicas: u32,
}

/// What this period's metrics say (absent when they are missing or stale).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Measured {
    /// Mean output tokens per request, this period's when it has one, else the last known.
    pub mean_output_tokens: Option<f64>,
    /// What the period teaches about capacity.
    pub learned: Learned,
    /// Since when there has been no demand at all.
    pub idle_since_s: Option<f64>,
    /// The offered demand of the stable window, tokens/s: this period's point of the trend.
    pub offered_tokens_per_s: f64,
    /// The demand and what it asks for; `None` while capacity is unknown.
    pub need: Option<Need>,
}

/// The `estimate` stage's output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Estimate {
    pub tracking: Tracking,
    /// `None`: metrics missing or stale.
    pub measured: Option<Measured>,
    /// Capacity of one replica within the SLO, tokens/s, as learned this period.
    pub capacity: Option<f64>,
}

/// The `estimate` stage.
pub(super) fn estimate(
    spec: &PolicySpec,
    obs: &Observations,
    state: &PolicyState,
    now_s: f64,
) -> Estimate {
    let tracking = track(obs, state, now_s);
    let Some(demand) = obs.demand.as_ref() else {
        return Estimate {
            tracking,
            measured: None,
            capacity: state.capacity_tokens_per_s_per_replica,
        };
    };
    let mean_output_tokens = demand
        .mean_output_tokens_per_request
        .filter(|t| t.is_finite() && *t > 0.0)
        .or(state.mean_output_tokens);
    let learned = learn(spec, obs, demand, state, tracking.ready_since_s, now_s);
    let capacity = learned.capacity_tokens_per_s_per_replica;
    let (offered_tokens_per_s, need) = need(
        spec,
        obs,
        demand,
        state,
        mean_output_tokens.unwrap_or(0.0),
        capacity,
        now_s,
    );
    Estimate {
        tracking,
        measured: Some(Measured {
            mean_output_tokens,
            learned,
            idle_since_s: idle_since(state.idle_since_s, demand, now_s),
            offered_tokens_per_s,
            need,
        }),
        capacity,
    }
}

/// How long the ready count has held steady and how long replicas have been pending.
fn track(obs: &Observations, state: &PolicyState, now_s: f64) -> Tracking {
    let ready = obs.ready_replicas;
    // A replica that became ready restarts the pending clock: during a long ramp replicas
    // are always pending, but each arrives in time.
    let mut pending_since_s = state.pending_since_s;
    if state.ready_count.is_some_and(|before| ready > before) && pending_since_s.is_some() {
        pending_since_s = Some(now_s);
    }
    let ready_since_s = if state.ready_count == Some(ready) {
        state.ready_since_s
    } else {
        now_s
    };
    let (pending_since_s, pending_for_s) = if obs.pending_replicas == 0 {
        (None, 0.0)
    } else {
        let since = pending_since_s.unwrap_or(now_s);
        (Some(since), now_s - since)
    };
    Tracking {
        ready_count: ready,
        ready_since_s,
        pending_since_s,
        pending_for_s,
        first_seen_s: state.first_seen_s.unwrap_or(now_s),
    }
}

/// Offered demand over both windows, in tokens/s and in replicas at the target utilisation.
/// A rising stable demand is extrapolated over the time new capacity needs to arrive (startup,
/// one period, and the half window the mean lags by). Returns the offered stable demand (the
/// trend's point) and the need, `None` while the capacity is unknown.
fn need(
    spec: &PolicySpec,
    obs: &Observations,
    demand: &Demand,
    state: &PolicyState,
    tokens_per_request: f64,
    capacity: Option<f64>,
    now_s: f64,
) -> (f64, Option<Need>) {
    let offered = |arrivals: f64| arrivals * tokens_per_request;
    let window_s = spec.stable_window.as_secs_f64();
    let startup_s = spec.startup_time.as_secs_f64();
    let queued_tokens = demand.queued_requests as f64 * tokens_per_request;
    // Arrivals counted by the gateway are the demand. Served throughput is not: while a
    // backlog drains it runs far above the arrivals, and counting it ordered a second and
    // third wave of replicas after a flash crowd (272 where 74 served its peak). Completions
    // (no gateway) are capped by capacity, so there the larger of the two counts.
    let from_arrivals = demand.source == DemandSource::GatewayArrivals && tokens_per_request > 0.0;
    let pick = |served: f64, arrivals: f64| {
        if from_arrivals {
            offered(arrivals)
        } else {
            served.max(offered(arrivals))
        }
    };
    let stable = pick(
        demand.output_tokens_per_s.stable,
        demand.arrival_requests_per_s.stable,
    );
    let panic = pick(
        demand.output_tokens_per_s.panic,
        demand.arrival_requests_per_s.panic,
    );
    let offered_stable = stable;
    let slope_per_s = state.demand_trend(now_s, window_s, stable);
    let lead_s = startup_s + spec.period.as_secs_f64() + 0.5 * window_s;
    // A rise smaller than the noise of two window means is no trend; and the extrapolation
    // never more than doubles the demand (a trend is a guess, the demand is measured).
    let rise = (slope_per_s.max(0.0) * lead_s).min(stable);
    // The window mean trails the present by half a window. When the short (panic) window has
    // not even reached halfway to where the trend puts the present, the rise has stopped and
    // only the lagging mean still shows it: extrapolating it would overshoot the plateau.
    let present = stable + slope_per_s.max(0.0) * 0.5 * window_s;
    let ended = panic < 0.5 * (stable + present);
    let rise = if rise > TREND_NOISE_SHARE * stable && !ended {
        rise
    } else {
        0.0
    };
    // A steady fall is not extrapolated into the future (scale-in is not urgent), but the
    // window mean trails the present by half a window: planning follows demand where it is
    // now, not where it was half a window ago.
    let fall = (-slope_per_s.min(0.0) * 0.5 * window_s).min(0.5 * stable);
    let fall = if fall > TREND_NOISE_SHARE * stable {
        fall
    } else {
        0.0
    };

    let Some(capacity) = capacity.filter(|c| *c > 0.0) else {
        return (offered_stable, None);
    };
    let per_replica = capacity * spec.target_utilization;
    let replicas =
        |tokens_per_s: f64| (tokens_per_s / per_replica).ceil().min(f64::from(u32::MAX)) as u32;
    let (stable_level, panic_level) = (stable + rise - fall, panic);
    // The backlog: what is queued, plus what will queue until replicas ordered now are ready
    // (the ready replicas' shortfall over a startup, once requests are seen waiting: a
    // shortfall on paper with no queue is headroom the target utilisation left). It is
    // drained over the window plus a startup (replicas added for it arrive no sooner).
    // Ignoring what queues meanwhile left the third minute after an abrupt rise to a backlog
    // the new replicas met unplanned.
    let ready_capacity = f64::from(obs.ready_replicas) * capacity;
    let shortfall_tokens = if demand.queued_requests > 0 {
        (stable_level - ready_capacity).max(0.0) * startup_s
    } else {
        0.0
    };
    let backlog_tokens_per_s = (queued_tokens + shortfall_tokens) / (window_s + startup_s);
    // The replicas a demand needs run below full capacity (target utilisation, rounding up),
    // and the fleet may already hold more (ready after a burst, or starting): that spare drains
    // the backlog first, and only the rest asks for more replicas, so a backlog that starting
    // replicas will absorb is not ordered twice. (Counting only the needed replicas' spare
    // ordered a second wave for a flash crowd's backlog that the first wave, just ready, was
    // already draining.)
    let existing = obs.ready_replicas.saturating_add(obs.pending_replicas);
    let with_backlog = |tokens_per_s: f64| {
        let serving = replicas(tokens_per_s).max(existing);
        let spare = f64::from(serving) * capacity - tokens_per_s;
        tokens_per_s + (backlog_tokens_per_s - spare.max(0.0)).max(0.0)
    };
    let stable = with_backlog(stable_level);
    let panic = with_backlog(panic_level);
    let need = Need {
        stable_tokens_per_s: stable,
        panic_tokens_per_s: panic,
        stable_replicas: replicas(stable),
        panic_replicas: replicas(panic),
        stable_level_replicas: replicas(stable_level),
        panic_level_replicas: replicas(panic_level),
    };
    (offered_stable, Some(need))
}
