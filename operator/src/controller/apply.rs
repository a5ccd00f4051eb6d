//! One reconcile of a valid ModelDeployment: apply the children, observe, decide, scale,
//! write status. Each step is a call into a pure function or a thin API call.

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;

use std::collections::HashMap;

use crate::scaling::attainment::PeriodSample;
use super::scaling::{ModelMemory, policy_spec};
use super::status::{StatusInput, StatusMemory, build_status};
use super::{Context, lock, model_key};
use crate::autoscaler::{Clocks, Decision, Observations, decide, snapshot};
use crate::budget::{GpuRequest, Grant};
use crate::children::{
    FIELD_MANAGER, child_name, engine_deployment, engine_network_policy, engine_pdb,
    engine_service, selector_string, served_name,
};
use crate::crd::{ModelDeployment, ModelDeploymentStatus};
use crate::error::{Error, Result};
use crate::metrics_source::{MetricsView, ModelRef, Observed};
use crate::scale::{KubernetesScaleTarget, ReplicaCounts, ScaleTarget};
use crate::telemetry::ModelFigures;

/// Server-side applies `object` (named `name`) with the operator's field manager.
async fn apply<K>(api: &Api<K>, name: &str, object: &K) -> Result<()>
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

/// Reconciles a ModelDeployment that is not being deleted.
pub async fn reconcile_model(md: &ModelDeployment, ctx: &Context) -> Result<Action> {
    let namespace = md.namespace().ok_or(Error::InvalidSpec(
        "a ModelDeployment must be namespaced".into(),
    ))?;
    if let Err(message) = md.spec.validate() {
        write_invalid_status(md, ctx, &namespace, &message).await?;
        return Err(Error::InvalidSpec(message));
    }
    if let Some(owner) = super::conflict::check(md, ctx.deployments.get()).await {
        return super::conflict::refuse(md, ctx, &namespace, &owner).await;
    }
    let client = ctx.client.clone();
    let name = child_name(md);
    let target = KubernetesScaleTarget::new(client.clone(), &namespace, &name);
    let counts = target
        .replicas()
        .await
        .map_err(|e| Error::Scale(e.to_string()))?;
    // Keep the live replica count (owned by the scale subresource); a new Deployment starts
    // at the minimum.
    let current = counts.map_or_else(|| md.spec.replicas.min.max(0).unsigned_abs(), |c| c.desired);
    let replicas = i32::try_from(current).unwrap_or(i32::MAX);
    apply(
        &Api::namespaced(client.clone(), &namespace),
        &name,
        &engine_deployment(md, replicas)?,
    )
    .await?;
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

    // A reconcile triggered by our own status write, or by a child's change, only re-applies.
    if let Some(wait) = ctx.not_due_for(md) {
        ctx.metrics.models.set(
            md,
            ModelFigures {
                desired_replicas: current,
                ready_replicas: counts.map_or(0, |c| c.ready),
            },
        );
        return Ok(Action::requeue(wait));
    }
    let view = observe(md, ctx, &namespace, &name).await;
    let counts_now = counts.unwrap_or(ReplicaCounts {
        desired: current,
        current: 0,
        ready: 0,
    });
    let (decision, grant) = decide_for(md, ctx, counts_now, &view);
    let desired = grant.as_ref().map_or(decision.replicas, |g| g.replicas);
    if desired != current {
        scale(md, ctx, &target, &view, counts_now, desired, &decision).await?;
    }
    let clocks = ctx.clocks();
    let status = build_status(&StatusInput {
        md,
        counts,
        desired,
        decision: &decision,
        grant: grant.as_ref(),
        view: &view,
        selector: selector_string(md),
        now: clocks.wall,
        memory: remember(md, ctx, &view, counts_now.ready, clocks),
    });
    ctx.metrics.models.set(
        md,
        ModelFigures {
            desired_replicas: desired,
            ready_replicas: status.ready_replicas.max(0).unsigned_abs(),
        },
    );
    patch_status(md, ctx, &namespace, status).await?;
    ctx.mark_decided(md);
    Ok(Action::requeue(md.spec.scaling.period.get()))
}

/// Asks the metrics source and folds the answer into the model's memory.
async fn observe(
    md: &ModelDeployment,
    ctx: &Context,
    namespace: &str,
    service: &str,
) -> MetricsView {
    let spec = &md.spec.scaling;
    let (stable_s, panic_s) = (
        spec.stable_window.as_secs_f64(),
        spec.panic_window.as_secs_f64(),
    );
    let model = ModelRef {
        namespace: namespace.into(),
        service: service.into(),
        served_name: served_name(md),
        stable_s,
        panic_s,
    };
    let observed = ctx.metrics_source.observe(&model).await;
    let clocks = ctx.clocks();
    let now_s = clocks.now_s;
    let mut memory = lock(&ctx.memory);
    let entry = memory_of(&mut memory, md, clocks);
    match observed {
        Observed::View(view) => view,
        Observed::Round(round) => {
            // Keep a little more than the stable window so its baseline is always there.
            entry
                .metrics
                .record(now_s, &round, stable_s + 3.0 * spec.period.as_secs_f64());
            // Metrics older than three periods are stale.
            entry
                .metrics
                .view(now_s, stable_s, panic_s, 3.0 * spec.period.as_secs_f64())
        }
    }
}

/// The model's memory; the first time this process sees the model (a new leader, a
/// restart), restored from what the last leader wrote into its status.
fn memory_of<'a>(
    memory: &'a mut HashMap<String, ModelMemory>,
    md: &ModelDeployment,
    clocks: Clocks,
) -> &'a mut ModelMemory {
    memory.entry(model_key(md)).or_insert_with(|| {
        ModelMemory::restored(&policy_spec(&md.spec), md.status.as_ref(), clocks)
    })
}

/// Folds this period into the SLO record and takes the snapshot of the model's memory that
/// status carries.
fn remember(
    md: &ModelDeployment,
    ctx: &Context,
    view: &MetricsView,
    ready: u32,
    clocks: Clocks,
) -> StatusMemory {
    let spec = policy_spec(&md.spec);
    let mut memory = lock(&ctx.memory);
    let entry = memory_of(&mut memory, md, clocks);
    let period = PeriodSample {
        ttft_p95_s: view.ttft_p95_s,
        tpot_p95_s: view.tpot_p95_s,
        output_tokens_per_s: view.demand.as_ref().map(|d| d.output_tokens_per_s.stable),
        gpus: f64::from(ready) * f64::from(spec.gpus_per_replica),
    };
    let unix_s = clocks.wall.as_millisecond() as f64 / 1e3;
    entry.slo.record(unix_s, &spec.slo, period);
    StatusMemory {
        autoscaler: Some(snapshot(&entry.policy, clocks)),
        slo: entry.slo.clone(),
        marked_for_removal: entry.marked_for_removal.clone(),
    }
}

/// Runs the policy, then the budget when one is set.
fn decide_for(
    md: &ModelDeployment,
    ctx: &Context,
    counts: ReplicaCounts,
    view: &MetricsView,
) -> (Decision, Option<Grant>) {
    let spec = policy_spec(&md.spec);
    let observations = Observations {
        ready_replicas: counts.ready,
        pending_replicas: counts.desired.saturating_sub(counts.ready),
        current_replicas: counts.desired,
        demand: view.demand.clone(),
        ttft_p95_s: view.ttft_p95_s,
        tpot_p95_s: view.tpot_p95_s,
        replica_loads: view.replica_loads.clone(),
    };
    let clocks = ctx.clocks();
    let now_s = clocks.now_s;
    let decision = {
        let mut memory = lock(&ctx.memory);
        let entry = memory_of(&mut memory, md, clocks);
        decide(&spec, &observations, &mut entry.policy, now_s)
    };
    let grant = ctx.settings.gpu_budget.map(|budget| {
        let request = GpuRequest {
            model: model_key(md),
            priority: md.spec.priority,
            desired_replicas: decision.replicas,
            min_replicas: spec.min_replicas,
            gpus_per_replica: md.spec.engine.gpus_per_replica(),
            slo_ratio: crate::autoscaler::slo_ratio(&spec, &observations),
        };
        // A model not reconciled for ten periods no longer holds GPUs in the book.
        let ttl_s = 10.0 * spec.period.as_secs_f64();
        lock(&ctx.budget).grant(budget, request, now_s, ttl_s)
    });
    (decision, grant)
}

/// Changes the replica count, marking the pods to remove first on scale-in, and records an
/// Event.
async fn scale(
    md: &ModelDeployment,
    ctx: &Context,
    target: &KubernetesScaleTarget,
    view: &MetricsView,
    counts: ReplicaCounts,
    desired: u32,
    decision: &Decision,
) -> Result<()> {
    let current = counts.desired;
    let mut removed = Vec::new();
    if desired < current {
        // The ReplicaSet removes pods that are not ready before any ready one, whatever
        // their deletion cost: only the rest of the scale-in falls on ready pods.
        let not_ready = counts.current.saturating_sub(counts.ready);
        let from_ready = (current - desired).saturating_sub(not_ready);
        let key = model_key(md);
        let before = lock(&ctx.memory)
            .get(&key)
            .map(|m| m.marked_for_removal.clone())
            .unwrap_or_default();
        removed = target
            .mark_many_for_removal(&view.replica_loads, from_ready, &before)
            .await
            .map_err(|e| Error::Scale(e.to_string()))?;
        if let Some(memory) = lock(&ctx.memory).get_mut(&key) {
            memory.marked_for_removal = removed.clone();
        }
    }
    target
        .set_replicas(desired)
        .await
        .map_err(|e| Error::Scale(e.to_string()))?;
    let direction = if desired > current { "up" } else { "down" };
    ctx.metrics.decision(direction, decision.reason.as_str());
    let mut note = format!("{current} -> {desired} replicas: {}", decision.message);
    if !removed.is_empty() {
        note.push_str(&format!(" (draining {} first)", removed.join(", ")));
    }
    let event = Event {
        type_: EventType::Normal,
        reason: decision.reason.as_str().into(),
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
