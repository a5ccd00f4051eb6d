//! The pipeline's third stage, `stabilise`: the target through the rate caps, the scale-down
//! window, one step down at a time and the spec's bounds; and the one match that names the
//! reason.

use super::capacity::slo_ratio;
use super::decision::DecisionReason;
use super::estimate::Estimate;
use super::foresight;
use super::observations::{DemandSource, Observations};
use super::oscillation;
use super::rise::within_arrival_noise;
use super::spec::PolicySpec;
use super::state::PolicyState;
use super::target::{Sized, Target};

/// Scale-down needs both p95s below this share of their targets (Dynamo's 0.8 × SLO).
const SCALE_DOWN_HEADROOM: f64 = 0.8;

/// Why the count holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Hold {
    /// Metrics missing or stale.
    MissingMetrics,
    /// Capacity not learned yet, and the SLO not broken (or replicas already starting).
    CapacityUnknown,
    /// The replicas there are fit the demand.
    Fit,
    /// Fewer would do, but a burst is still being absorbed.
    Panic,
    /// Fewer would do, but a p95 is at this share of its SLO.
    SloNotMet { ratio: f64 },
    /// Fewer would do once the starting replicas are ready.
    WaitingForPending,
    /// Fewer would do, but the scale-down window remembers more.
    Stabilizing,
    /// Fewer would do, but only an idle period goes below this floor.
    Floor { floor: u32 },
    /// Fewer would do now, but the model's history predicts a rise within the lead time and
    /// the scale-in window (`foresight`).
    PredictedRise,
    /// More would do, but the demand is past what these replicas carry by no more than the
    /// stable window's arrival noise, with the SLO met and nothing queued (`rise`).
    WithinNoise,
}

/// Why the count rises.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Rise {
    /// Stable-window demand needs more.
    Demand,
    /// A burst needs more (panic mode).
    Burst,
    /// Interactive demand fits; the batches need more.
    Batch,
    /// Capacity not learned yet and the p95 at this share of its SLO: one more.
    SloBroken { ratio: f64 },
    /// The model's history predicts a rise within the lead time: pre-warm (`foresight`).
    Predicted,
}

/// What the count does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Move {
    Hold(Hold),
    Up(Rise),
    /// One step down, to no less than the window's highest recommendation.
    Down,
    FromZero,
    ToZero,
}

/// The `stabilise` stage's output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Stabilised {
    pub step: Move,
    /// The count the step asks for, before the bounds.
    pub wanted: u32,
    /// Within `[min_replicas, max_replicas]`.
    pub replicas: u32,
    /// The scale-in stabilisation window in force, seconds.
    pub window_s: f64,
    /// The highest recommendation within it (held at the current count while the policy
    /// has watched the model for less than a window); 0 without a sized target.
    pub stabilized: u32,
}

/// The `stabilise` stage.
pub(super) fn stabilise(
    spec: &PolicySpec,
    obs: &Observations,
    state: &PolicyState,
    estimate: &Estimate,
    target: &Target,
    now_s: f64,
) -> Stabilised {
    let current = obs.current_replicas;
    let window_s = oscillation::window_s(spec, state);
    let (step, wanted, stabilized) = match target {
        Target::MissingMetrics => (Move::Hold(Hold::MissingMetrics), clamp(spec, current), 0),
        Target::FromZero => (Move::FromZero, clamp(spec, 1), 0),
        Target::ToZero { .. } => (Move::ToZero, 0, 0),
        // Before any capacity is known: hold, but grow while the SLO is broken.
        Target::UnknownCapacity => match slo_ratio(spec, obs) {
            Some(ratio) if ratio > 1.0 && obs.pending_replicas == 0 => {
                let one_more = up_cap(spec, current).min(current.saturating_add(1));
                (
                    Move::Up(Rise::SloBroken { ratio }),
                    clamp(spec, one_more),
                    0,
                )
            }
            _ => (Move::Hold(Hold::CapacityUnknown), clamp(spec, current), 0),
        },
        Target::Replicas(sized) => sized_step(spec, obs, state, estimate, sized, window_s, now_s),
    };
    Stabilised {
        step,
        wanted,
        replicas: clamp(spec, wanted),
        window_s,
        stabilized,
    }
}

/// The step for a sized target: up at once (capped per period without gateway arrivals), or
/// down by the scale-down rules.
fn sized_step(
    spec: &PolicySpec,
    obs: &Observations,
    state: &PolicyState,
    estimate: &Estimate,
    sized: &Sized,
    window_s: f64,
    now_s: f64,
) -> (Move, u32, u32) {
    let (current, raw) = (obs.current_replicas, sized.raw);
    let stabilized = state.stabilized(now_s, window_s, sized.level);
    if raw > current && noise_crossing(spec, obs, estimate, sized) {
        return (
            Move::Hold(Hold::WithinNoise),
            clamp(spec, current),
            stabilized,
        );
    }
    if raw > current {
        // Arrivals counted by the gateway are demand not capped by the capacity that exists:
        // the needed count is reached in one decision. Completions (no gateway) are capped by
        // capacity, so each step can only see so far past it: there the step is capped.
        let replicas = match obs.demand.as_ref().map(|d| d.source) {
            Some(DemandSource::EngineCompletions) => raw.min(up_cap(spec, current)),
            _ => raw,
        };
        let rise = if (sized.panicking || sized.rising)
            && sized.need.panic_replicas > sized.need.stable_replicas
        {
            Rise::Burst
        } else if sized
            .ahead
            .is_some_and(|a| a.prewarm_replicas == sized.interactive)
            && sized.interactive > sized.need.stable_replicas
        {
            Rise::Predicted
        } else if sized.interactive <= current {
            Rise::Batch
        } else {
            Rise::Demand
        };
        return (Move::Up(rise), replicas, stabilized);
    }
    if raw == current {
        return (Move::Hold(Hold::Fit), clamp(spec, current), stabilized);
    }
    let warming_up = now_s - estimate.tracking.first_seen_s < window_s;
    let stabilized = if warming_up {
        stabilized.max(current)
    } else {
        stabilized
    };
    // Never below what a rise the history predicts will need (`foresight`).
    let floor = foresight::scale_in_floor(sized.ahead.as_ref(), current);
    let (step, replicas) = scale_down(spec, obs, raw, stabilized.max(floor), sized.panicking);
    let step = match step {
        Move::Hold(Hold::Stabilizing) if floor > stabilized => Move::Hold(Hold::PredictedRise),
        step => step,
    };
    (step, replicas, stabilized)
}

/// Whether a rise of the stable demand past the current replicas is only the window's noise
/// at their boundary: gateway arrivals, no burst, rise, backlog, batch or predicted rise, both
/// p95s within the scale-down headroom, and the planned demand within the arrival noise of
/// what the replicas carry. A fleet sized at its boundary otherwise added a replica every few
/// minutes and held it for a scale-in window (one replica in two on a small fleet).
fn noise_crossing(
    spec: &PolicySpec,
    obs: &Observations,
    estimate: &Estimate,
    sized: &Sized,
) -> bool {
    let Some(demand) = obs.demand.as_ref() else {
        return false;
    };
    let calm = !sized.panicking
        && !sized.rising
        && sized.batch.replicas == 0
        && sized.ahead.is_none()
        && demand.queued_requests == 0
        && sized.need.stable_replicas == sized.need.stable_level_replicas
        && demand.source == DemandSource::GatewayArrivals
        && obs.pending_replicas == 0;
    let headroom = slo_ratio(spec, obs).is_some_and(|r| r <= SCALE_DOWN_HEADROOM);
    let capacity = estimate.capacity.unwrap_or(0.0);
    let fits = f64::from(obs.current_replicas) * capacity * spec.target_utilization;
    calm && headroom && within_arrival_noise(spec, demand, sized.planned_tokens_per_s, fits)
}

/// Scale-down rules: not while panicking, not while a p95 is near or over the SLO, not below
/// the stabilised recommendation, at most one step per period.
fn scale_down(
    spec: &PolicySpec,
    obs: &Observations,
    raw: u32,
    stabilized: u32,
    panicking: bool,
) -> (Move, u32) {
    let current = obs.current_replicas;
    let hold = |why: Hold| (Move::Hold(why), clamp(spec, current));
    if panicking {
        return hold(Hold::Panic);
    }
    if let Some(ratio) = slo_ratio(spec, obs).filter(|r| *r > SCALE_DOWN_HEADROOM) {
        return hold(Hold::SloNotMet { ratio });
    }
    if obs.pending_replicas > 0 && obs.ready_replicas < raw {
        return hold(Hold::WaitingForPending);
    }
    if stabilized >= current {
        return hold(Hold::Stabilizing);
    }
    // Only `ScaleToZero` (after the idle time) goes below one replica.
    let floor = spec.min_replicas.max(1);
    if current <= floor {
        return hold(Hold::Floor { floor });
    }
    let step = ((f64::from(current) * spec.scale_down_max_fraction).floor() as u32).max(1);
    let replicas = clamp(
        spec,
        stabilized.max(current.saturating_sub(step)).max(floor),
    );
    (Move::Down, replicas)
}

/// Scale-up cap per decision: `max(current × factor, current + min_step)`.
fn up_cap(spec: &PolicySpec, current: u32) -> u32 {
    let by_factor = (f64::from(current) * spec.scale_up_max_factor).ceil() as u32;
    by_factor.max(current.saturating_add(spec.scale_up_min_step))
}

/// `replicas` within the spec's bounds.
pub(super) fn clamp(spec: &PolicySpec, replicas: u32) -> u32 {
    replicas.clamp(spec.min_replicas, spec.max_replicas.max(spec.min_replicas))
}

/// The reason of a stabilised step: the one place reasons are named.
pub(super) fn reason(stabilised: &Stabilised) -> DecisionReason {
    if stabilised.replicas != stabilised.wanted {
        return DecisionReason::Bounded;
    }
    match stabilised.step {
        Move::Hold(Hold::MissingMetrics) => DecisionReason::HoldMissingMetrics,
        Move::Hold(Hold::CapacityUnknown | Hold::Fit | Hold::Floor { .. } | Hold::WithinNoise) => {
            DecisionReason::Steady
        }
        Move::Hold(Hold::Panic) => DecisionReason::HoldPanic,
        Move::Hold(Hold::SloNotMet { .. }) => DecisionReason::HoldSloNotMet,
        Move::Hold(Hold::WaitingForPending) => DecisionReason::WaitingForPending,
        Move::Hold(Hold::Stabilizing) => DecisionReason::Stabilizing,
        Move::Hold(Hold::PredictedRise) => DecisionReason::HoldPredictedRise,
        Move::Up(Rise::Predicted) => DecisionReason::PreWarm,
        Move::Up(Rise::Demand | Rise::SloBroken { .. }) => DecisionReason::ScaleUp,
        Move::Up(Rise::Burst) => DecisionReason::PanicScaleUp,
        Move::Up(Rise::Batch) => DecisionReason::ScaleUpForBatch,
        Move::Down => DecisionReason::ScaleDown,
        Move::FromZero => DecisionReason::ScaleFromZero,
        Move::ToZero => DecisionReason::ScaleToZero,
    }
}
