//! The zero edges of the policy: idle tracking, scale to zero after the idle time, and scale
//! from zero at once on waiting or arriving requests.

use super::capacity::slo_ratio;
use super::observations::{Demand, Observations};
use super::spec::PolicySpec;

/// Since when there has been no demand at all (nothing queued, running or arriving), given
/// `idle_since_s` before this period.
pub(super) fn idle_since(idle_since_s: Option<f64>, demand: &Demand, now_s: f64) -> Option<f64> {
    // A batch with work left is demand: scaling to zero would stop it short of its deadline.
    let busy = demand.queued_requests > 0
        || demand.running_requests > 0
        || demand.batch.pending()
        || demand.arrival_requests_per_s.stable > 0.0
        || demand.output_tokens_per_s.stable > 0.0;
    if busy {
        None
    } else {
        Some(idle_since_s.unwrap_or(now_s))
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

/// A zero edge the fleet is at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Edge {
    /// At zero replicas with requests waiting or arriving, or batch work left.
    FromZero,
    /// No demand for this many seconds, past `scale_to_zero_after`.
    ToZero { idle_for_s: f64 },
}

/// Scale from zero on any waiting or arriving request; scale to zero after the idle time
/// (`idle_since_s` as of this period).
pub(super) fn edge(
    spec: &PolicySpec,
    obs: &Observations,
    demand: &Demand,
    idle_since_s: Option<f64>,
    now_s: f64,
) -> Option<Edge> {
    let current = obs.current_replicas;
    if current == 0 && wants_a_first_replica(demand) {
        return Some(Edge::FromZero);
    }
    let idle_for_s = idle_since_s.map(|since| now_s - since)?;
    let after = spec.scale_to_zero_after?;
    let slo_met = slo_ratio(spec, obs).is_none_or(|r| r <= 1.0);
    (spec.min_replicas == 0 && current > 0 && slo_met && idle_for_s >= after.as_secs_f64())
        .then_some(Edge::ToZero { idle_for_s })
}
