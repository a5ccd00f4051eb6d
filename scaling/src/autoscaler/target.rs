//! The pipeline's second stage, `target`: what the estimated demand asks for, as a typed
//! result (hold and why, from zero, to zero, or a replica count with what it is made of),
//! before rate caps, the scale-down window and the bounds.

use super::batch::{self, BatchNeed};
use super::estimate::{Estimate, Need};
use super::foresight::{self, Ahead};
use super::observations::DemandSource;
use super::observations::Observations;
use super::oscillation;
use super::rise::{rise_outgrows, significant_rise};
use super::spec::PolicySpec;
use super::state::PolicyState;
use super::zero::{Edge, edge};

/// What demand asks for this period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Target {
    /// Metrics missing or stale: hold, never scale down blind.
    MissingMetrics,
    /// Capacity not learned yet: hold, or grow while the SLO is broken.
    UnknownCapacity,
    /// At zero replicas with requests waiting or arriving, or batch work left: one at once.
    FromZero,
    /// No demand for `scale_to_zero_after`: to zero.
    ToZero {
        /// How long there has been no demand, seconds.
        idle_for_s: f64,
    },
    /// A replica count from demand and capacity.
    Replicas(Sized),
}

/// A replica count from demand and capacity, and what it is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sized {
    /// The demand and what it asks for.
    pub need: Need,
    /// Panic mode (a burst) lasts until then, this period's trigger included.
    pub panic_until_s: Option<f64>,
    /// Whether the panic mode is on: the burst demand counts.
    pub panicking: bool,
    /// Whether the burst window shows a rise beyond noise that outgrows the replicas ready and
    /// on the way (`rise`): the burst demand counts this period, however small the step.
    pub rising: bool,
    /// A rise the model's own history predicts (`foresight`): pre-warm, no scale-in before it.
    pub ahead: Option<Ahead>,
    /// Replicas interactive demand needs (backlog included; a predicted rise's pre-warm in).
    pub interactive: u32,
    /// What running batches add on top.
    pub batch: BatchNeed,
    /// This period's required batch rate, tokens/s (the point its sustained rate is read from).
    pub batch_required_tokens_per_s: f64,
    /// Interactive plus batch replicas: the raw target.
    pub raw: u32,
    /// The level demand asks for without the backlog's drain, plus the batch replicas: what
    /// the scale-down window remembers (drain replicas are a transient need).
    pub level: u32,
    /// The demand planned for, tokens/s.
    pub planned_tokens_per_s: f64,
}

/// The `target` stage.
pub(super) fn target(
    spec: &PolicySpec,
    obs: &Observations,
    state: &PolicyState,
    estimate: &Estimate,
    now_s: f64,
) -> Target {
    let (Some(demand), Some(measured)) = (obs.demand.as_ref(), estimate.measured.as_ref()) else {
        return Target::MissingMetrics;
    };
    match edge(spec, obs, demand, measured.idle_since_s, now_s) {
        Some(Edge::FromZero) => return Target::FromZero,
        Some(Edge::ToZero { idle_for_s }) => return Target::ToZero { idle_for_s },
        None => {}
    }
    let Some(need) = measured.need else {
        return Target::UnknownCapacity;
    };
    // Knative's panic mode: on when the burst needs ≥ threshold × ready replicas, and held
    // for a stable window after the last trigger.
    // With gateway arrivals the burst must also be one beyond Poisson noise (`rise`), or the
    // replicas saturated (more requests waiting than replicas: a backlog is no noise, and a
    // longer prompt mix raises it with no more arrivals): on one or two replicas near the
    // boundary, the 6 s window's noise alone asks for 2× the ready replicas every few minutes,
    // and each false panic held an extra replica for a window.
    let ready = f64::from(obs.ready_replicas.max(1));
    let beyond_noise = demand.source != DemandSource::GatewayArrivals
        || significant_rise(spec, demand)
        || demand.queued_requests > u64::from(obs.ready_replicas);
    let panic_until_s =
        if f64::from(need.panic_replicas) >= spec.panic_threshold * ready && beyond_noise {
            Some(now_s + spec.stable_window.as_secs_f64())
        } else {
            state.panic_until_s
        };
    let panicking = panic_until_s.is_some_and(|until| now_s < until);
    let existing = obs.ready_replicas.saturating_add(obs.pending_replicas);
    let rising = rise_outgrows(
        spec,
        demand,
        measured.mean_output_tokens.unwrap_or(0.0),
        estimate.capacity.unwrap_or(0.0),
        existing,
    );
    let (interactive, planned_tokens_per_s, level) = if panicking || rising {
        (
            need.stable_replicas.max(need.panic_replicas),
            need.panic_tokens_per_s.max(need.stable_tokens_per_s),
            need.stable_level_replicas.max(need.panic_level_replicas),
        )
    } else {
        (
            need.stable_replicas,
            need.stable_tokens_per_s,
            need.stable_level_replicas,
        )
    };
    let window_s = oscillation::window_s(spec, state);
    // Foresight: replicas for a rise the model's own history predicts within the lead time.
    let ahead = foresight::ahead(
        spec,
        &state.foresight,
        estimate.capacity,
        planned_tokens_per_s,
        window_s,
        now_s,
    );
    let (interactive, planned_tokens_per_s) =
        foresight::prewarmed(ahead.as_ref(), interactive, planned_tokens_per_s);
    let capacity = estimate.capacity.unwrap_or(0.0);
    let startup_s = spec.startup_time.as_secs_f64();
    // Batch work adds replicas only when the capacity the interactive ones leave idle does not
    // cover what the batches need by their deadlines (`batch`), at the rate that has held for
    // a startup: replicas ordered for a shorter rise arrive after it. (The gateway reports a
    // batch inside its deadline's margin as due in a second: with a few tokens left there and
    // another batch's backlog beside it, one period asked for 92 replicas.)
    let batch_required_tokens_per_s = demand.batch.required_output_tokens_per_s;
    let mut batch_demand = demand.batch;
    batch_demand.required_output_tokens_per_s =
        state.sustained_batch_required(now_s, startup_s, batch_required_tokens_per_s);
    let batch = batch::need(
        &batch_demand,
        interactive,
        planned_tokens_per_s,
        capacity,
        startup_s,
    );
    Target::Replicas(Sized {
        need,
        panic_until_s,
        panicking,
        rising,
        ahead,
        interactive,
        batch,
        batch_required_tokens_per_s,
        raw: interactive.saturating_add(batch.replicas),
        // Replicas for batch work are a level (a batch's need lasts hours): remembered with
        // it, so a period of tight rounding does not drain one to start it again a minute
        // later, and the fleet keeps them while the batches need them.
        level: level.saturating_add(batch.replicas),
        planned_tokens_per_s,
    })
}
