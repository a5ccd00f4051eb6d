//! A reconcile of a valid ModelDeployment applies its children and hands the object to the
//! scaling clock; a decision, when the clock finds the model due, observes, ticks the model's
//! scaling loop, carries the tick out and writes status. Each step is a call into a pure
//! function or a thin API call.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;

use super::scaling::policy_spec;
use super::status::{StatusInput, StatusMemory, build_status};
use super::{Context, lock, model_key};
use crate::autoscaler::Clocks;
use crate::budget::{GpuRequest, Grant};
use crate::children::{
    FIELD_MANAGER, child_name, engine_deployment, engine_network_policy, engine_pdb,
    engine_service, selector_string, served_name,
};
use crate::crd::{ModelDeployment, ModelDeploymentStatus};
use crate::error::{Error, Result};
use crate::metrics_source::{ModelRef, Observed};
use crate::scale::{KubernetesScaleTarget, ReplicaCounts, ScaleTarget};
use crate::scaling::{self, Tick};
use crate::telemetry::ModelFigures;

/// Server-side applies `object` (named `name`) with the operator's field manager.
pub(super) async fn apply<K>(api: &Api<K>, name: &str, object: &K) -> Result<()>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(object))
        .await
        .map_err(|e| Error::kube(format!("applying {} {name}", K::kind(&())), e))?;
    Ok(())
}

/// How often a reconcile comes back on its own (children re-applied, server-side no-ops
/// unless someone edited them): the watches bring every change sooner; this is the safety net
/// kube-runtime recommends for a missed event.
pub const RESYNC: Duration = Duration::from_secs(300);

/// Reconciles a ModelDeployment that is not being deleted: applies its children and hands
/// the object to the scaling clock ([`super::ticker`]), which decides its replica count.
pub async fn reconcile_model(md: &Arc<ModelDeployment>, ctx: &Context) -> Result<Action> {
    let namespace = md.namespace().ok_or(Error::InvalidSpec(
        "a ModelDeployment must be namespaced".into(),
    ))?;
    if let Err(message) = md.spec.validate() {
        withdraw(md, ctx);
        write_invalid_status(md, ctx, &namespace, &message).await?;
        return Err(Error::InvalidSpec(message));
    }
    if let Some(refusal) = super::conflict::check(md, ctx).await {
        withdraw(md, ctx);
        return super::conflict::refuse(md, ctx, &namespace, &refusal).await;
    }
    // A cache the operator fills comes first: no replica before the Job has succeeded.
    if let super::fill::Gate::Closed(action) = super::fill::gate(md, ctx, &namespace).await? {
        withdraw(md, ctx);
        return Ok(action);
    }
    let client = ctx.client.clone();
    let name = child_name(md);
    let target = KubernetesScaleTarget::new(client.clone(), &namespace, &name);
    let guard = lock(&ctx.models).entry(md, ctx.clocks()).guard.clone();
    let held = guard.lock().await;
    let counts = target
        .replicas()
        .await
        .map_err(|e| Error::Scale(e.to_string()))?;
    // Keep the live replica count (owned by the scale subresource); a new Deployment starts
    // at the minimum.
    let current = counts.map_or_else(|| min_replicas(md), |c| c.desired);
    let replicas = i32::try_from(current).unwrap_or(i32::MAX);
    apply(
        &Api::namespaced(client.clone(), &namespace),
        &name,
        &engine_deployment(md, replicas)?,
    )
    .await?;
    drop(held);
    apply(
        &Api::namespaced(client.clone(), &namespace),
        &name,
        &engine_service(md)?,
    )
    .await?;
    apply(
        &Api::namespaced(client.clone(), &namespace),
        &name,
        &engine_pdb(md)?,
    )
    .await?;
    if let Some(peers) = &ctx.settings.engine_ingress_from {
        apply(
            &Api::namespaced(client.clone(), &namespace),
            &name,
            &engine_network_policy(md, peers)?,
        )
        .await?;
    }

    // Hand the model to the scaling clock: where the sampler scrapes it (it may have moved:
    // a renamed served name, other windows) and the object its decisions act on.
    let model = model_ref(md, &namespace, &name);
    {
        let clocks = ctx.clocks();
        let mut models = lock(&ctx.models);
        let entry = models.entry(md, clocks);
        entry.metrics = Some(model);
        entry.object = Some(md.clone());
        // Every reconcile (a replica turning ready triggers one) times cold starts.
        if let Some(counts) = counts {
            entry.scaling.observe_counts(clocks.now_s, counts);
        }
    }
    ctx.metrics.models.set(
        md,
        ModelFigures {
            desired_replicas: current,
            ready_replicas: counts.map_or(0, |c| c.ready),
        },
    );
    // The clock looks now: a new model, or a new generation, decides at once rather than at
    // its next tick (a model not due is left alone; the look costs a lock).
    ctx.decide_now.notify_one();
    Ok(Action::requeue(RESYNC))
}

/// The replicas a model's Deployment starts with: the count a person set, else the minimum.
fn min_replicas(md: &ModelDeployment) -> u32 {
    held_replicas(md).unwrap_or_else(|| md.spec.replicas.min.max(0).unsigned_abs())
}

/// The count a person set through the `scale` subresource (`spec.replicas.desired`), which
/// the autoscaler holds instead of deciding.
pub fn held_replicas(md: &ModelDeployment) -> Option<u32> {
    md.spec.replicas.desired.map(|n| n.max(0).unsigned_abs())
}

/// Takes `md` off the scaling clock: an invalid or refused object is not scaled.
fn withdraw(md: &ModelDeployment, ctx: &Context) {
    if let Some(entry) = lock(&ctx.models).get_mut(&model_key(md)) {
        entry.object = None;
    }
}

/// One decision for `md` (the object its last reconcile handed over): read the live replica
/// count, observe, tick the model's scaling loop, carry the tick out, write status. Called by
/// the scaling clock when the model is due ([`super::ticker::decide_due`]).
pub async fn decide(md: &ModelDeployment, ctx: &Context) -> Result<()> {
    let key = model_key(md);
    let (guard, model) = {
        let mut models = lock(&ctx.models);
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
    let Some(memory) = status_memory(md, ctx, tick.clocks) else {
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
    if let Some(entry) = lock(&ctx.models).get_mut(&key) {
        entry
            .due
            .mark_decided(md.metadata.generation, tick.clocks.now_s);
        entry.decision_failures = 0;
    }
    Ok(())
}

/// Where the model's metrics are, and the windows they are read over.
fn model_ref(md: &ModelDeployment, namespace: &str, service: &str) -> ModelRef {
    let spec = &md.spec.scaling;
    ModelRef {
        namespace: namespace.into(),
        service: service.into(),
        served_name: served_name(md),
        stable_s: spec.stable_window.as_secs_f64(),
        panic_s: spec.panic_window.as_secs_f64(),
    }
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
    let mut models = lock(&ctx.models);
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
fn status_memory(md: &ModelDeployment, ctx: &Context, clocks: Clocks) -> Option<StatusMemory> {
    let mut models = lock(&ctx.models);
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
    if let Some(entry) = lock(&ctx.models).get_mut(&model_key(md)) {
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

pub(super) async fn patch_status(
    md: &ModelDeployment,
    ctx: &Context,
    namespace: &str,
    status: ModelDeploymentStatus,
) -> Result<()> {
    let api: Api<ModelDeployment> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = Patch::Apply(json!({
        "apiVersion": "tokenscale.dev/v1alpha1",
        "kind": "ModelDeployment",
        "status": status,
    }));
    api.patch_status(
        &md.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &patch,
    )
    .await
    .map_err(|e| Error::kube(format!("writing status of {}", model_key(md)), e))?;
    Ok(())
}

/// Says in status why an invalid spec is not acted on.
async fn write_invalid_status(
    md: &ModelDeployment,
    ctx: &Context,
    namespace: &str,
    message: &str,
) -> Result<()> {
    let mut status = md.status.clone().unwrap_or_default();
    let previous = status.conditions.clone();
    let now = k8s_openapi::jiff::Timestamp::now();
    let generation = md.metadata.generation;
    status.conditions = vec![super::status::condition(
        &previous,
        crate::crd::CONDITION_READY,
        false,
        "InvalidSpec",
        message.to_string(),
        generation,
        now,
    )];
    status.observed_generation = generation;
    patch_status(md, ctx, namespace, status).await
}
