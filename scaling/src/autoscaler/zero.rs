//! The zero edges of the policy: idle tracking, scale to zero after the idle time, and scale
//! from zero at once on waiting or arriving requests.

use super::capacity::slo_ratio;
use super::decide::{clamp, finish};
use super::decision::{Decision, DecisionReason};
use super::observations::{Demand, Observations};
use super::spec::PolicySpec;
use super::state::PolicyState;

/// Remembers since when there has been no demand at all (nothing queued, running or arriving).
pub(super) fn track_idle(state: &mut PolicyState, demand: &Demand, now_s: f64) {
    // A batch with work left is demand: scaling to zero would stop it short of its deadline.
    let busy = demand.queued_requests > 0
        || demand.running_requests > 0
        || demand.batch.pending()
        || demand.arrival_requests_per_s.stable > 0.0
        || demand.output_tokens_per_s.stable > 0.0;
    if busy {
        state.idle_since_s = None;
    } else if state.idle_since_s.is_none() {
        state.idle_since_s = Some(now_s);
    }
}

/// Whether `demand` wants a first replica where there is none: a request waits or arrives,
/// or a batch has work left. Every scaler of tokenscale decides at once when it does, not at
/// its next period (the operator through the gateway's queue watch, `up` and `sim` at each
/// one-second sample; see `ScalingLoop::wants_a_first_replica`).
pub fn wants_a_first_replica(demand: &Demand) -> bool {
    demand.queued_requests > 0
        || demand.arrival_requests_per_s.panic > 0.0
        || demand.arrival_requests_per_s.stable > 0.0
        || demand.batch.pending()
}

/// Scale from zero on any waiting or arriving request; scale to zero after the idle time.
pub(super) fn zero_edges(
    spec: &PolicySpec,
    obs: &Observations,
    demand: &Demand,
    state: &mut PolicyState,
    now_s: f64,
) -> Option<Decision> {
    let current = obs.current_replicas;
    if current == 0 && wants_a_first_replica(demand) {
        let replicas = clamp(spec, 1);
        let message = if demand.batch.pending() && demand.queued_requests == 0 {
            format!(
                "a batch has {:.0} output tokens left at zero replicas: starting {replicas}",
                demand.batch.backlog_output_tokens
            )
        } else {
            format!(
                "{} requests waiting at zero replicas: starting {replicas}",
                demand.queued_requests
            )
        };
        return Some(finish(
            spec,
            state,
            replicas,
            DecisionReason::ScaleFromZero,
            message,
            None,
            now_s,
            current,
        ));
    }
    let idle_for_s = state.idle_since_s.map(|since| now_s - since)?;
    let after = spec.scale_to_zero_after?;
    let slo_met = slo_ratio(spec, obs).is_none_or(|r| r <= 1.0);
    if spec.min_replicas == 0 && current > 0 && slo_met && idle_for_s >= after.as_secs_f64() {
        let message = format!("no demand for {idle_for_s:.0} s: scaling to zero");
        return Some(finish(
            spec,
            state,
            0,
            DecisionReason::ScaleToZero,
            message,
            Some(0.0),
            now_s,
            current,
        ));
    }
    None
}
