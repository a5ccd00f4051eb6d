//! The gate a reconcile passes before the engine Deployment: with `model.cache.fill`, the
//! claim and its fill Job are applied (the Job once: an existing one is only read), and
//! until the Job has succeeded no Deployment is applied and the model is left off the
//! scaling clock; `Ready` says why (`CacheFilling`, or `CacheFillFailed` with the Job's
//! reason).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::Context;
use super::apply::{RESYNC, apply, patch_status};
use crate::children::cache::{FillState, cache_claim, fill_job, fill_state, job_name};
use crate::crd::{CONDITION_READY, ModelDeployment};
use crate::error::{Error, Result};

/// How often a model whose cache is filling is looked at again (Jobs are not watched).
pub const FILL_POLL: Duration = Duration::from_secs(10);

/// Whether the reconcile may go on to the Deployment.
#[derive(Debug, PartialEq)]
pub enum Gate {
    /// No fill asked for, or the Job has succeeded.
    Open,
    /// Replicas wait: come back with this action.
    Closed(Action),
}

/// Applies the claim and (once) the Job of a filled cache and reads where the Job stands.
pub async fn gate(md: &ModelDeployment, ctx: &Context, namespace: &str) -> Result<Gate> {
    let (Some(claim), Some(job)) = (cache_claim(md)?, fill_job(md)?) else {
        return Ok(Gate::Open);
    };
    let client = ctx.client.clone();
    apply(
        &Api::namespaced(client.clone(), namespace),
        &crate::children::cache::claim_name(md),
        &claim,
    )
    .await?;
    let jobs: Api<Job> = Api::namespaced(client, namespace);
    let name = job_name(md);
    let existing = jobs
        .get_opt(&name)
        .await
        .map_err(|e| Error::kube(format!("reading Job {name}"), e))?;
    let state = match existing {
        Some(job) => fill_state(job.status.as_ref()),
        None => {
            apply(&jobs, &name, &job).await?;
            FillState::Filling
        }
    };
    let (reason, message, again) = match state {
        FillState::Filled => return Ok(Gate::Open),
        FillState::Filling => (
            "CacheFilling",
            format!("Job {name} is filling the model cache; replicas start once it has succeeded"),
            FILL_POLL,
        ),
        FillState::Failed(why) => (
            "CacheFillFailed",
            format!("Job {name} failed ({why}); delete it to try again"),
            RESYNC,
        ),
    };
    write_waiting_status(md, ctx, namespace, reason, message).await?;
    Ok(Gate::Closed(Action::requeue(again)))
}

/// `Ready` false with `reason`; the other conditions are kept.
async fn write_waiting_status(
    md: &ModelDeployment,
    ctx: &Context,
    namespace: &str,
    reason: &str,
    message: String,
) -> Result<()> {
    let mut status = md.status.clone().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    let ready = super::status::condition(
        &status.conditions,
        CONDITION_READY,
        false,
        reason,
        message,
        md.metadata.generation,
        now,
    );
    status.conditions.retain(|c| c.type_ != CONDITION_READY);
    status.conditions.insert(0, ready);
    status.observed_generation = md.metadata.generation;
    tracing::info!(model = %md.name_any(), reason, "replicas wait for the model cache");
    patch_status(md, ctx, namespace, status).await
}
