//! A reconcile of a valid ModelDeployment applies its children and hands the object to the
//! scaling clock ([`crate::clock`]), which decides its replica count when the model is due.
//! Each step is a call into a pure function or a thin API call.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;

use super::{Context, model_key};
use crate::children::{
    FIELD_MANAGER, child_name, engine_deployment, engine_network_policy, engine_pdb,
    engine_service, served_name,
};
use crate::clock::{ClockMsg, Handover};
use crate::crd::{ModelDeployment, ModelDeploymentStatus};
use crate::error::{Error, Result};
use crate::metrics_source::ModelRef;
use crate::scale::{KubernetesScaleTarget, ScaleTarget};
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
/// the object to the scaling clock ([`crate::clock`]), which decides its replica count.
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
    let guard = ctx.reconciles.guard(&model_key(md));
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
    // a renamed served name, other windows), the object its decisions act on and the counts
    // read (a replica turning ready triggers a reconcile: the clock times its start).
    ctx.clock.tell(ClockMsg::Handover(Box::new(Handover {
        object: md.clone(),
        metrics: model_ref(md, &namespace, &name),
        counts,
        at: ctx.clocks(),
        guard,
    })));
    ctx.metrics.models.set(
        md,
        ModelFigures {
            desired_replicas: current,
            ready_replicas: counts.map_or(0, |c| c.ready),
        },
    );
    Ok(Action::requeue(RESYNC))
}

/// The replicas a model's Deployment starts with: the count a person set, else the minimum.
pub(crate) fn min_replicas(md: &ModelDeployment) -> u32 {
    held_replicas(md).unwrap_or_else(|| md.spec.replicas.min.max(0).unsigned_abs())
}

/// The count a person set through the `scale` subresource (`spec.replicas.desired`), which
/// the autoscaler holds instead of deciding.
pub fn held_replicas(md: &ModelDeployment) -> Option<u32> {
    md.spec.replicas.desired.map(|n| n.max(0).unsigned_abs())
}

/// Takes `md` off the scaling clock: an invalid or refused object is not scaled.
fn withdraw(md: &ModelDeployment, ctx: &Context) {
    ctx.clock.tell(ClockMsg::Withdrawn { key: model_key(md) });
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

/// Writes `status` into the ModelDeployment's status (server-side apply).
pub(crate) async fn patch_status(
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
