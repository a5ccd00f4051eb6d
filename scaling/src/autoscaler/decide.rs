//! `decide`: one scaling decision from the spec, this period's observations and the policy's
//! memory. Pure: no I/O, no clock (the caller passes `now_s`), deterministic.

use std::fmt::Write as _;

use super::batch;
use super::capacity::{learn, slo_ratio};
use super::decision::{Decision, DecisionReason};
use super::observations::{Demand, DemandSource, Observations};
use super::oscillation;
use super::spec::PolicySpec;
use super::state::PolicyState;
use super::zero::{track_idle, zero_edges};

/// A trend must lift the planned demand by more than this share to count (noise floor).
const TREND_NOISE_SHARE: f64 = 0.05;
/// Scale-down needs both p95s below this share of their targets (Dynamo's 0.8 × SLO).
const SCALE_DOWN_HEADROOM: f64 = 0.8;
/// Replicas pending longer than this many startup times are called out as stuck.
const STARTUP_TIMEOUT_FACTOR: f64 = 3.0;

/// Demand in output tokens/s over both windows, and what it asks of the fleet.
struct Need {
    /// Stable-window demand plus its rising trend carried over the planning lead.
    stable_tokens_per_s: f64,
    panic_tokens_per_s: f64,
    stable_replicas: u32,
    panic_replicas: u32,
    /// The same without the backlog's drain: the level demand asks for.
    stable_level_replicas: u32,
    panic_level_replicas: u32,
}

/// Decides the replica count for one model. `now_s` is any monotonic clock in seconds (the
/// same one across calls). See the module docs for the rules in words.
pub fn decide(
    spec: &PolicySpec,
    obs: &Observations,
    state: &mut PolicyState,
    now_s: f64,
) -> Decision {
    state.note_ready(obs.ready_replicas, now_s);
    let pending_for_s = state.note_pending(obs.pending_replicas, now_s);
    let first_seen_s = *state.first_seen_s.get_or_insert(now_s);
    let current = obs.current_replicas;
    let Some(demand) = obs.demand.as_ref() else {
        let replicas = clamp(spec, current);
        let message = format!("metrics missing or stale: holding at {replicas} replicas");
        return finish(
            spec,
            state,
            replicas,
            DecisionReason::HoldMissingMetrics,
            message,
            None,
            now_s,
            current,
        );
    };
    if let Some(tokens) = demand
        .mean_output_tokens_per_request
        .filter(|t| t.is_finite() && *t > 0.0)
    {
        state.mean_output_tokens = Some(tokens);
    }
    learn(spec, obs, demand, state, now_s);
    track_idle(state, demand, now_s);

    if let Some(decision) = zero_edges(spec, obs, demand, state, now_s) {
        return decision;
    }
    let Some(need) = need(spec, obs, demand, state, now_s) else {
        return unknown_capacity(spec, obs, state, now_s);
    };
    let panicking = update_panic(spec, obs, &need, state, now_s);
    let interactive = if panicking {
        need.stable_replicas.max(need.panic_replicas)
    } else {
        need.stable_replicas
    };
    let planned_tokens_per_s = if panicking {
        need.panic_tokens_per_s.max(need.stable_tokens_per_s)
    } else {
        need.stable_tokens_per_s
    };
    let planned = Some(planned_tokens_per_s);
    let capacity = state.capacity_tokens_per_s_per_replica.unwrap_or(0.0);
    let startup_s = spec.startup_time.as_secs_f64();
    // Batch work adds replicas only when the capacity the interactive ones leave idle does not
    // cover what the batches need by their deadlines (`batch`), at the rate that has held for
    // a startup: replicas ordered for a shorter rise arrive after it. (The gateway reports a
    // batch inside its deadline's margin as due in a second: with a few tokens left there and
    // another batch's backlog beside it, one period asked for 92 replicas.)
    let mut batch_demand = demand.batch;
    batch_demand.required_output_tokens_per_s =
        state.sustained_batch_required(now_s, startup_s, demand.batch.required_output_tokens_per_s);
    let batch = batch::need(
        &batch_demand,
        interactive,
        planned_tokens_per_s,
        capacity,
        startup_s,
    );
    let raw = interactive.saturating_add(batch.replicas);
    let window_s = oscillation::window_s(spec, state);
    // Replicas asked for only to drain a backlog are a transient need: the stabilisation
    // window remembers the level demand asked for, so they go once the queue is gone. Replicas
    // for batch work are a level (a batch's need lasts hours): remembered with it, so a
    // period of tight rounding does not drain one to start it again a minute later, and the
    // fleet keeps them while the batches need them.
    let level = if panicking {
        need.stable_level_replicas.max(need.panic_level_replicas)
    } else {
        need.stable_level_replicas
    };
    let stabilized = state.stabilized(now_s, window_s, level.saturating_add(batch.replicas));
    let mut numbers = format!(
        "demand {:.0} tokens/s (burst {:.0}), capacity {:.0} tokens/s per replica at {:.0}% target",
        need.stable_tokens_per_s,
        need.panic_tokens_per_s,
        capacity,
        spec.target_utilization * 100.0
    );
    if demand.batch.pending() {
        // Writing to a `String` cannot fail.
        let _ = write!(
            numbers,
            "; batches need {:.0} tokens/s by their deadlines, {:.0} left idle",
            batch.required_tokens_per_s, batch.idle_tokens_per_s
        );
        if batch.replicas > 0 {
            let _ = write!(numbers, " (+{} replicas for them)", batch.replicas);
        }
    }
    // Pending replicas count as capacity, so a stuck one is never replaced again and again;
    // but the reader must hear about it.
    if startup_s > 0.0 && pending_for_s > STARTUP_TIMEOUT_FACTOR * startup_s {
        // Writing to a `String` cannot fail.
        let _ = write!(
            numbers,
            " ({} replicas not ready for {pending_for_s:.0} s, over {STARTUP_TIMEOUT_FACTOR}× the \
             {startup_s:.0} s startup time: they are not replaced, check why they do not start)",
            obs.pending_replicas
        );
    }

    if raw > current {
        // Not clamped here: `finish` clamps and says so (`Bounded`).
        // Arrivals counted by the gateway are demand not capped by the capacity that exists:
        // the needed count is reached in one decision. Completions (no gateway) are capped by
        // capacity, so each step can only see so far past it: there the step is capped.
        let replicas = match demand.source {
            DemandSource::GatewayArrivals => raw,
            DemandSource::EngineCompletions => raw.min(up_cap(spec, current)),
        };
        let reason = if panicking && need.panic_replicas > need.stable_replicas {
            DecisionReason::PanicScaleUp
        } else if interactive <= current {
            DecisionReason::ScaleUpForBatch
        } else {
            DecisionReason::ScaleUp
        };
        let message = format!("{numbers}: needs {raw} replicas, scaling {current} → {replicas}");
        return finish(
            spec, state, replicas, reason, message, planned, now_s, current,
        );
    }
    if raw == current {
        let message = format!("{numbers}: {current} replicas fit");
        return finish(
            spec,
            state,
            clamp(spec, current),
            DecisionReason::Steady,
            message,
            planned,
            now_s,
            current,
        );
    }
    let warming_up = now_s - first_seen_s < window_s;
    let stabilized = if warming_up {
        stabilized.max(current)
    } else {
        stabilized
    };
    let (replicas, reason, why) =
        scale_down(spec, obs, current, raw, stabilized, window_s, panicking);
    let message = format!("{numbers}: {why}");
    finish(
        spec, state, replicas, reason, message, planned, now_s, current,
    )
}

/// Scale-down rules: not while panicking, not while a p95 is near or over the SLO, not below
/// the stabilised recommendation, at most one step per period.
fn scale_down(
    spec: &PolicySpec,
    obs: &Observations,
    current: u32,
    raw: u32,
    stabilized: u32,
    window_s: f64,
    panicking: bool,
) -> (u32, DecisionReason, String) {
    let hold = clamp(spec, current);
    if panicking {
        return (
            hold,
            DecisionReason::HoldPanic,
            format!("{raw} would do, but a burst is still being absorbed"),
        );
    }
    if let Some(ratio) = slo_ratio(spec, obs).filter(|r| *r > SCALE_DOWN_HEADROOM) {
        let why = format!(
            "{raw} would do, but p95 latency is at {:.0}% of the SLO",
            ratio * 100.0
        );
        return (hold, DecisionReason::HoldSloNotMet, why);
    }
    if obs.pending_replicas > 0 && obs.ready_replicas < raw {
        return (
            hold,
            DecisionReason::WaitingForPending,
            format!("{raw} would do once starting replicas are ready"),
        );
    }
    if stabilized >= current {
        let why = format!(
            "{raw} would do, but demand needed {stabilized} within the last {window_s:.0} s"
        );
        return (hold, DecisionReason::Stabilizing, why);
    }
    // Only `ScaleToZero` (after the idle time) goes below one replica.
    let floor = spec.min_replicas.max(1);
    if current <= floor {
        let why = format!("{raw} would do, but only an idle period scales below {floor}");
        return (hold, DecisionReason::Steady, why);
    }
    let step = ((f64::from(current) * spec.scale_down_max_fraction).floor() as u32).max(1);
    let replicas = clamp(
        spec,
        stabilized.max(current.saturating_sub(step)).max(floor),
    );
    (
        replicas,
        DecisionReason::ScaleDown,
        format!(
            "demand has needed at most {stabilized} for the stabilisation window, scaling {current} → {replicas}"
        ),
    )
}

/// Scale-up cap per decision: `max(current × factor, current + min_step)`.
fn up_cap(spec: &PolicySpec, current: u32) -> u32 {
    let by_factor = (f64::from(current) * spec.scale_up_max_factor).ceil() as u32;
    by_factor.max(current.saturating_add(spec.scale_up_min_step))
}

pub(super) fn clamp(spec: &PolicySpec, replicas: u32) -> u32 {
    replicas.clamp(spec.min_replicas, spec.max_replicas.max(spec.min_replicas))
}

/// Offered demand over both windows, in tokens/s and in replicas at the target utilisation.
/// A rising stable demand is extrapolated over the time new capacity needs to arrive (startup,
/// one period, and the half window the mean lags by). `None` while the capacity is unknown.
fn need(
    spec: &PolicySpec,
    obs: &Observations,
    demand: &Demand,
    state: &mut PolicyState,
    now_s: f64,
) -> Option<Need> {
    let tokens_per_request = state.mean_output_tokens.unwrap_or(0.0);
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

    let capacity = state
        .capacity_tokens_per_s_per_replica
        .filter(|c| *c > 0.0)?;
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
    Some(Need {
        stable_tokens_per_s: stable,
        panic_tokens_per_s: panic,
        stable_replicas: replicas(stable),
        panic_replicas: replicas(panic),
        stable_level_replicas: replicas(stable_level),
        panic_level_replicas: replicas(panic_level),
    })
}

/// Knative's panic mode: on when the burst needs ≥ threshold × ready replicas, and held for a
/// stable window after the last trigger.
fn update_panic(
    spec: &PolicySpec,
    obs: &Observations,
    need: &Need,
    state: &mut PolicyState,
    now_s: f64,
) -> bool {
    let ready = f64::from(obs.ready_replicas.max(1));
    if f64::from(need.panic_replicas) >= spec.panic_threshold * ready {
        state.panic_until_s = Some(now_s + spec.stable_window.as_secs_f64());
    }
    state.panic_until_s.is_some_and(|until| now_s < until)
}

/// Before any capacity is known: hold, but grow while the SLO is broken.
fn unknown_capacity(
    spec: &PolicySpec,
    obs: &Observations,
    state: &mut PolicyState,
    now_s: f64,
) -> Decision {
    let current = obs.current_replicas;
    match slo_ratio(spec, obs) {
        Some(ratio) if ratio > 1.0 && obs.pending_replicas == 0 => {
            let replicas = clamp(spec, up_cap(spec, current).min(current.saturating_add(1)));
            let message = format!(
                "capacity not learned yet and p95 at {:.0}% of the SLO: scaling {current} → {replicas}",
                ratio * 100.0
            );
            finish(
                spec,
                state,
                replicas,
                DecisionReason::ScaleUp,
                message,
                None,
                now_s,
                current,
            )
        }
        _ => {
            let message = format!("capacity not learned yet: holding at {current} replicas");
            finish(
                spec,
                state,
                clamp(spec, current),
                DecisionReason::Steady,
                message,
                None,
                now_s,
                current,
            )
        }
    }
}

/// Applies the bounds, records the scale time and builds the decision.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    spec: &PolicySpec,
    state: &mut PolicyState,
    replicas: u32,
    reason: DecisionReason,
    message: String,
    demand_tokens_per_s: Option<f64>,
    now_s: f64,
    current: u32,
) -> Decision {
    let bounded = clamp(spec, replicas);
    let (reason, message) = if bounded != replicas {
        (
            DecisionReason::Bounded,
            format!(
                "{message}; bounded to {bounded} by min {} / max {}",
                spec.min_replicas, spec.max_replicas
            ),
        )
    } else {
        (reason, message)
    };
    if bounded != current {
        state.last_scale_s = Some(now_s);
    }
    oscillation::note(spec, state, current, bounded, now_s);
    Decision {
        replicas: bounded,
        reason,
        message,
        demand_tokens_per_s,
        capacity_tokens_per_s_per_replica: state.capacity_tokens_per_s_per_replica,
        panicking: state.panic_until_s.is_some_and(|until| now_s < until),
    }
}
