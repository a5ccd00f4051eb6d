//! The decision's message: a pure function of the pipeline's stages, in words a
//! `kubectl describe` reader follows, with the numbers behind them.

use std::fmt::Write as _;

use super::estimate::Estimate;
use super::observations::Observations;
use super::spec::PolicySpec;
use super::stabilise::{Hold, Move, Rise, Stabilised};
use super::target::{Sized, Target};

/// Replicas pending longer than this many startup times are called out as stuck.
const STARTUP_TIMEOUT_FACTOR: f64 = 3.0;

/// The message of a decision.
pub(super) fn message(
    spec: &PolicySpec,
    obs: &Observations,
    estimate: &Estimate,
    target: &Target,
    stabilised: &Stabilised,
) -> String {
    let current = obs.current_replicas;
    let wanted = stabilised.wanted;
    let message = match (target, stabilised.step) {
        (Target::FromZero, _) => match obs.demand.as_ref() {
            Some(d) if d.batch.pending() && d.queued_requests == 0 => format!(
                "a batch has {:.0} output tokens left at zero replicas: starting {wanted}",
                d.batch.backlog_output_tokens
            ),
            d => format!(
                "{} requests waiting at zero replicas: starting {wanted}",
                d.map_or(0, |d| d.queued_requests)
            ),
        },
        (Target::ToZero { idle_for_s }, _) => {
            format!("no demand for {idle_for_s:.0} s: scaling to zero")
        }
        (Target::Replicas(sized), step) => {
            let numbers = numbers(spec, obs, estimate, sized);
            format!("{numbers}: {}", sized_why(sized, stabilised, step, current))
        }
        (_, Move::Up(Rise::SloBroken { ratio })) => format!(
            "capacity not learned yet and p95 at {:.0}% of the SLO: scaling {current} → {wanted}",
            ratio * 100.0
        ),
        (Target::UnknownCapacity, _) => {
            format!("capacity not learned yet: holding at {current} replicas")
        }
        (Target::MissingMetrics, _) => {
            format!("metrics missing or stale: holding at {wanted} replicas")
        }
    };
    if stabilised.replicas == wanted {
        message
    } else {
        format!(
            "{message}; bounded to {} by min {} / max {}",
            stabilised.replicas, spec.min_replicas, spec.max_replicas
        )
    }
}

/// Demand, capacity and the batches' need, and replicas that do not start.
fn numbers(spec: &PolicySpec, obs: &Observations, estimate: &Estimate, sized: &Sized) -> String {
    let mut numbers = format!(
        "demand {:.0} tokens/s (burst {:.0}), capacity {:.0} tokens/s per replica at {:.0}% target",
        sized.need.stable_tokens_per_s,
        sized.need.panic_tokens_per_s,
        estimate.capacity.unwrap_or(0.0),
        spec.target_utilization * 100.0
    );
    if obs.demand.as_ref().is_some_and(|d| d.batch.pending()) {
        let batch = &sized.batch;
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
    let startup_s = spec.startup_time.as_secs_f64();
    let pending_for_s = estimate.tracking.pending_for_s;
    if startup_s > 0.0 && pending_for_s > STARTUP_TIMEOUT_FACTOR * startup_s {
        // Writing to a `String` cannot fail.
        let _ = write!(
            numbers,
            " ({} replicas not ready for {pending_for_s:.0} s, over {STARTUP_TIMEOUT_FACTOR}× the \
             {startup_s:.0} s startup time: they are not replaced, check why they do not start)",
            obs.pending_replicas
        );
    }
    numbers
}

/// What a sized target's step did, in words.
fn sized_why(sized: &Sized, stabilised: &Stabilised, step: Move, current: u32) -> String {
    let (raw, wanted) = (sized.raw, stabilised.wanted);
    let (stabilized, window_s) = (stabilised.stabilized, stabilised.window_s);
    match step {
        Move::Up(Rise::Predicted) => match sized.ahead {
            Some(a) => format!(
                "pre-warming for the predicted rise at {} ({:.0} tokens/s, recurring every {:.0} s): \
                 needs {raw} replicas, scaling {current} → {wanted}",
                a.when(),
                a.prewarm_tokens_per_s,
                a.period_s
            ),
            None => format!("needs {raw} replicas, scaling {current} → {wanted}"),
        },
        Move::Up(_) => format!("needs {raw} replicas, scaling {current} → {wanted}"),
        Move::Hold(Hold::Fit) => format!("{current} replicas fit"),
        Move::Hold(Hold::WithinNoise) => format!(
            "{current} replicas fit: the demand for {raw} is within the arrival noise of their load"
        ),
        Move::Hold(Hold::Panic) => {
            format!("{raw} would do, but a burst is still being absorbed")
        }
        Move::Hold(Hold::SloNotMet { ratio }) => format!(
            "{raw} would do, but p95 latency is at {:.0}% of the SLO",
            ratio * 100.0
        ),
        Move::Hold(Hold::WaitingForPending) => {
            format!("{raw} would do once starting replicas are ready")
        }
        Move::Hold(Hold::Stabilizing) => format!(
            "{raw} would do, but demand needed {stabilized} within the last {window_s:.0} s"
        ),
        Move::Hold(Hold::PredictedRise) => match sized.ahead {
            Some(a) => format!(
                "{raw} would do, but a rise to {:.0} tokens/s is predicted at {} (recurring every \
                 {:.0} s): holding {current}",
                a.hold_tokens_per_s,
                a.when(),
                a.period_s
            ),
            None => format!("{raw} would do, but a rise is predicted: holding {current}"),
        },
        Move::Hold(Hold::Floor { floor }) => {
            format!("{raw} would do, but only an idle period scales below {floor}")
        }
        Move::Down => format!(
            "demand has needed at most {stabilized} for the stabilisation window, scaling {current} → {wanted}"
        ),
        // Not a sized target's steps (`stabilise` gives these for the other targets only).
        Move::Hold(Hold::MissingMetrics | Hold::CapacityUnknown)
        | Move::FromZero
        | Move::ToZero => {
            format!("{current} replicas")
        }
    }
}
