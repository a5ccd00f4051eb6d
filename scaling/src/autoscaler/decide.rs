//! `decide`: one scaling decision from the spec, this period's observations and the policy's
//! memory, as a pipeline read top to bottom (as Knative's KPA): [`estimate`] (demand, capacity,
//! the SLO) → [`target`] (what demand asks for) → [`stabilise`] (rate caps, the scale-down
//! window, steps, bounds) → [`remember`], the one place the policy's memory is written. Pure:
//! no I/O, no clock (the caller passes `now_s`), deterministic.

use super::decision::Decision;
use super::estimate::{Estimate, estimate};
use super::explain::message;
use super::observations::Observations;
use super::oscillation;
use super::spec::PolicySpec;
use super::stabilise::{Stabilised, reason, stabilise};
use super::state::PolicyState;
use super::target::{Target, target};

/// Decides the replica count for one model. `now_s` is any monotonic clock in seconds (the
/// same one across calls). See the module docs for the rules in words.
pub fn decide(
    spec: &PolicySpec,
    obs: &Observations,
    state: &mut PolicyState,
    now_s: f64,
) -> Decision {
    let estimate = estimate(spec, obs, state, now_s);
    let target = target(spec, obs, state, &estimate, now_s);
    let stabilised = stabilise(spec, obs, state, &estimate, &target, now_s);
    let decision = Decision {
        replicas: stabilised.replicas,
        reason: reason(&stabilised),
        message: message(spec, obs, &estimate, &target, &stabilised),
        demand_tokens_per_s: match &target {
            Target::Replicas(sized) => Some(sized.planned_tokens_per_s),
            Target::ToZero { .. } => Some(0.0),
            Target::MissingMetrics | Target::UnknownCapacity | Target::FromZero => None,
        },
        capacity_tokens_per_s_per_replica: estimate.capacity,
        panicking: match &target {
            Target::Replicas(sized) => sized.panicking,
            _ => state.panic_until_s.is_some_and(|until| now_s < until),
        },
    };
    remember(spec, obs, state, &estimate, &target, &stabilised, now_s);
    decision
}

/// Writes what this period leaves in the policy's memory: the replica tracking, what was
/// learned, the samples of its windows (only those the stages read this period), the panic
/// deadline and the scale history.
fn remember(
    spec: &PolicySpec,
    obs: &Observations,
    state: &mut PolicyState,
    estimate: &Estimate,
    target: &Target,
    stabilised: &Stabilised,
    now_s: f64,
) {
    let tracking = estimate.tracking;
    state.ready_count = Some(tracking.ready_count);
    state.ready_since_s = tracking.ready_since_s;
    state.pending_since_s = tracking.pending_since_s;
    state.first_seen_s = Some(tracking.first_seen_s);
    let stable_window_s = spec.stable_window.as_secs_f64();
    if let Some(measured) = &estimate.measured {
        let learned = measured.learned;
        state.mean_output_tokens = measured.mean_output_tokens;
        state.last_queued_requests = Some(learned.queued_requests);
        state.record_burst_load(now_s, stable_window_s, learned.burst_per_replica);
        state.capacity_ceiling_tokens_per_s = learned.ceiling_tokens_per_s;
        state.capacity_tokens_per_s_per_replica = learned.capacity_tokens_per_s_per_replica;
        state.idle_since_s = measured.idle_since_s;
        if spec.foresight {
            state.foresight.record(now_s, measured.offered_tokens_per_s);
        }
        // The trend's point is kept once demand was sized (capacity known or not), not at a
        // zero edge.
        if matches!(target, Target::UnknownCapacity | Target::Replicas(_)) {
            state.record_demand(now_s, stable_window_s, measured.offered_tokens_per_s);
        }
    }
    if let Target::Replicas(sized) = target {
        state.panic_until_s = sized.panic_until_s;
        let startup_s = spec.startup_time.as_secs_f64();
        state.record_batch_required(now_s, startup_s, sized.batch_required_tokens_per_s);
        state.record_recommendation(now_s, stabilised.window_s, sized.level);
    }
    let current = obs.current_replicas;
    if stabilised.replicas != current {
        state.last_scale_s = Some(now_s);
    }
    oscillation::note(spec, state, current, stabilised.replicas, now_s);
}
