//! One decision for a model the clock found due: read the live replica count, observe, tick
//! the model's scaling loop (and the GPU budget), carry the tick out, write status. Each step
//! is a call into a pure function or a thin API call; the clock's state is touched between
//! the calls, never across one.

use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::Clock;
use super::scaling::policy_spec;
use super::status::{StatusInput, StatusMemory, build_status};
use crate::autoscaler::Clocks;
use crate::budget::{GpuRequest, Grant};
use crate::children::{child_name, selector_string};
use crate::controller::apply::{held_replicas, min_replicas, patch_status};
use crate::controller::{Context, model_key};
use crate::crd::ModelDeployment;
use crate::error::{Error, Result};
use crate::metrics_source::Observed;
use crate::scale::{KubernetesScaleTarget, ReplicaCounts, ScaleTarget};
use crate::scaling::{self, Tick};
use crate::telemetry::ModelFigures;

/// One decision for `md` (the object its last reconcile handed over): read the live replica
/// count, observe, tick the model's scaling loop, carry the tick out, write status. Called by
/// the scaling clock when the model is due ([`super::ticker::decide_due`]).
pub async fn decide(md: &ModelDeployment, ctx: &Context) -> Result<()> {
    let key = model_key(md);
    let (guard, model) = {
        let mut models = ctx.clock.models();
        let Some(entry) = models.get_mut(&key) else {
            return Ok(()); // deleted since the clock looked
        };
        (entry.guard.clone(), entry.metrics.clone())
    };
    let _held = guard.lock().await;
    let namespace = md.namespace().unwrap_or_default();
    let name = child_name(md);
    let target = KubernetesScaleTarget::new(ctx.client.clone(), &namespace, &name);
    let counts = target
        .replicas()
        .await
        .map_err(|e| Error::Scale(e.to_string()))?;
    super::start_phases::observe(md, ctx, &namespace, counts).await;
    let observed = match &model {
        Some(model) => ctx.metrics_source.observe(model).await,
        None => Observed::View(Default::default()),
    };
    let counts_now = counts.unwrap_or(ReplicaCounts {
        desired: min_replicas(md),
        current: 0,
        ready: 0,
    });
    let Some((tick, grant)) = tick_for(md, ctx, observed, counts_now) else {
        return Ok(());
    };
    if tick.scales() {
        scale(md, ctx, &target, &tick).await?;
    }
    super::start_phases::refine(md, ctx, &tick.view);
    let Some(memory) = status_memory(md, &ctx.clock, tick.clocks) else {
        return Ok(());
    };
    let status = build_status(&StatusInput {
        md,
        counts,
        desired: tick.target_replicas,
        decision: &tick.decision,
        grant: grant.as_ref(),
        view: &tick.view,
        selector: selector_string(md),
        now: tick.clocks.wall,
        memory,
    });
    ctx.metrics.models.set(
        md,
        ModelFigures {
            desired_replicas: tick.target_replicas,
            ready_replicas: status.ready_replicas.max(0).unsigned_abs(),
        },
    );
    patch_status(md, ctx, &namespace, status).await?;
    if let Some(entry) = ctx.clock.models().get_mut(&key) {
        entry
            .due
            .mark_decided(md.metadata.generation, tick.clocks.now_s);
        entry.decision_failures = 0;
    }
    Ok(())
}

/// Ticks the model's scaling loop, then applies the GPU budget when one is set (the loop
/// leaves the budget to the operator: it is shared by every model). `None` when the model
/// was deleted while its decision ran.
fn tick_for(
    md: &ModelDeployment,
    ctx: &Context,
    observed: Observed,
    counts: ReplicaCounts,
) -> Option<(Tick, Option<Grant>)> {
    let clocks = ctx.clocks();
    let spec = policy_spec(&md.spec);
    let key = model_key(md);
    let mut models = ctx.clock.models();
    let scaling = &mut models.get_mut(&key)?.scaling;
    scaling.set_spec(spec.clone());
    let mut tick = match observed {
        Observed::Round(round) => scaling.tick(clocks, &round, counts),
        Observed::View(view) => scaling.tick_view(clocks, view, counts),
    };
    if let Some(held) = held_replicas(md) {
        // A person set the count (`kubectl scale`): the policy still observes and learns,
        // but the count is theirs until they remove it.
        tick.limit_to(held);
        scaling.note_applied(&tick);
    }
    let grant = ctx.settings.gpu_budget.map(|budget| {
        let request = GpuRequest {
            model: key.clone(),
            priority: md.spec.priority,
            desired_replicas: tick.target_replicas,
            min_replicas: spec.min_replicas,
            gpus_per_replica: md.spec.engine.gpus_per_replica(),
            slo_ratio: crate::autoscaler::slo_ratio(&spec, &tick.observations),
        };
        // A model that has not decided for ten periods no longer holds GPUs in the book.
        let ttl_s = 10.0 * spec.period.as_secs_f64();
        models.grant(&key, budget, request, clocks.now_s, ttl_s)
    });
    if let Some(grant) = &grant {
        tick.limit_to(grant.replicas);
        if let Some(entry) = models.get_mut(&key) {
            entry.scaling.note_applied(&tick);
        }
    }
    Some((tick, grant))
}

/// The parts of the model's loop that status carries, so a new leader continues from them.
fn status_memory(md: &ModelDeployment, clock: &Clock, clocks: Clocks) -> Option<StatusMemory> {
    let mut models = clock.models();
    let entry = models.get_mut(&model_key(md))?;
    let scaling = &entry.scaling;
    Some(StatusMemory {
        autoscaler: Some(scaling.policy_snapshot(clocks)),
        slo: scaling.slo().clone(),
        marked_for_removal: scaling.marked_for_removal().to_vec(),
        cold_start_s: scaling.expected_cold_start_s(),
        cold_starts_s: scaling.measured_cold_starts_s(),
        lead_time_s: Some(scaling.lead_time_s()),
        start_phases: entry.start_phases.clone(),
    })
}

/// Carries the tick out on the Deployment (marking the pods a scale-in removes first), notes
/// the marks in the loop, and records an Event.
async fn scale(
    md: &ModelDeployment,
    ctx: &Context,
    target: &KubernetesScaleTarget,
    tick: &Tick,
) -> Result<()> {
    let (current, desired) = (tick.counts.desired, tick.target_replicas);
    let marked = scaling::apply(tick, target)
        .await
        .map_err(|e| Error::Scale(e.to_string()))?;
    if let Some(entry) = ctx.clock.models().get_mut(&model_key(md)) {
        entry.scaling.note_marked(marked.clone());
    }
    let decision = &tick.decision;
    let direction = if desired > current { "up" } else { "down" };
    ctx.metrics.decision(direction, decision.reason.as_str());
    // A person's count (`kubectl scale`) is theirs, not the policy's: the Event says so, in
    // the Scaling condition's words.
    let (reason, why) = match held_replicas(md) {
        Some(held) => (
            super::status::AUTOSCALING_PAUSED.to_string(),
            super::status::paused_message(md, held),
        ),
        None => (
            decision.reason.as_str().to_string(),
            decision.message.clone(),
        ),
    };
    let mut note = format!("{current} -> {desired} replicas: {why}");
    if tick.scales_in() && !marked.is_empty() {
        note.push_str(&format!(" (draining {} first)", marked.join(", ")));
    }
    let event = Event {
        type_: EventType::Normal,
        reason,
        note: Some(note.chars().take(1000).collect()),
        action: if desired > current {
            "ScaleUp".into()
        } else {
            "ScaleDown".into()
        },
        secondary: None,
    };
    ctx.recorder
        .publish(&event, &md.object_ref(&()))
        .await
        .map_err(|e| Error::kube("publishing a scale Event", e))
}
