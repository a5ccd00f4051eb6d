//! The model cache the operator fills (`model.cache.fill`): a claim it creates, a Job that
//! runs `tokenscale-engine pull` into it once, and the read-only mount replicas get. Pure
//! builders; `controller/fill.rs` applies them and holds the Deployment back until the Job
//! has succeeded.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, ResourceRequirements, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::deployment::{
    DEFAULT_CACHE_SIZE, HF_HOME_PATH, container_security_context, hf_token_env,
    pod_security_context,
};
use super::{ChildError, LABEL_MODEL_DEPLOYMENT, child_metadata, child_name};
use crate::{EngineKind, ModelCache, ModelDeployment, spec::DEFAULT_IMAGE};

/// Volume name of the filled claim in engine pods (beside the per-pod `model-cache`).
pub const FILLED_VOLUME: &str = "model-cache-filled";
/// How many times the Job retries a failed pull (each resumes what is on the claim).
const BACKOFF_LIMIT: i32 = 4;

/// The cache spec when the operator is asked to fill it.
pub fn fill_spec(md: &ModelDeployment) -> Option<&ModelCache> {
    md.spec.model.cache.as_ref().filter(|c| c.fills())
}

/// Name of the claim the operator creates: `<name>-engine-cache`.
pub fn claim_name(md: &ModelDeployment) -> String {
    format!("{}-cache", child_name(md))
}

/// Name of the fill Job of the current source: a new source gets a new Job (a Job's pod
/// template cannot change), the same source the same name, so the Job is created once.
pub fn job_name(md: &ModelDeployment) -> String {
    let hash = fnv1a(md.spec.model.source.as_bytes());
    let prefix: String = child_name(md).chars().take(63 - 14).collect();
    format!("{}-fill-{hash:08x}", prefix.trim_end_matches('-'))
}

/// 32-bit FNV-1a: stable across builds, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The claim the Job fills and the replicas read.
pub fn cache_claim(md: &ModelDeployment) -> Result<Option<PersistentVolumeClaim>, ChildError> {
    let Some(cache) = fill_spec(md) else {
        return Ok(None);
    };
    let mut metadata = child_metadata(md)?;
    metadata.name = Some(claim_name(md));
    let size = cache.size.as_deref().unwrap_or(DEFAULT_CACHE_SIZE);
    Ok(Some(PersistentVolumeClaim {
        metadata,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![cache.access_mode.unwrap_or_default().as_str().into()]),
            storage_class_name: cache.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    }))
}

/// The Job that pulls the `hf://` source into the claim with our engine's fetch (ranged,
/// resumable, verified), whatever engine kind serves it: all three kinds that can use the
/// cache read the Hugging Face layout it writes.
pub fn fill_job(md: &ModelDeployment) -> Result<Option<Job>, ChildError> {
    if fill_spec(md).is_none() {
        return Ok(None);
    }
    let mut metadata = child_metadata(md)?;
    metadata.name = Some(job_name(md));
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".into(),
            "tokenscale-cache-fill".into(),
        ),
        (
            LABEL_MODEL_DEPLOYMENT.into(),
            md.metadata.name.clone().unwrap_or_default(),
        ),
    ]);
    // Not the engine's selector labels: the Service, PDB and spread must not count it.
    metadata.labels = Some(labels.clone());
    let pod = PodSpec {
        containers: vec![fill_container(md)],
        restart_policy: Some("OnFailure".into()),
        volumes: Some(vec![
            Volume {
                name: "tmp".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                name: FILLED_VOLUME.into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim_name(md),
                    read_only: Some(false),
                }),
                ..Default::default()
            },
        ]),
        security_context: Some(pod_security_context()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        ..Default::default()
    };
    Ok(Some(Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        status: None,
    }))
}

fn fill_container(md: &ModelDeployment) -> Container {
    // Our engine's image: the spec's for our kind (a mirror), else this release's CPU build.
    let image = match (&md.spec.engine.kind, &md.spec.engine.image) {
        (EngineKind::Tokenscale, Some(image)) => image.clone(),
        _ => DEFAULT_IMAGE.to_string(),
    };
    let var = |name: &str, value: &str| EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    };
    let mut env = vec![var("HOME", "/tmp"), var("HF_HOME", HF_HOME_PATH)];
    env.extend(hf_token_env(md));
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(memory.into())),
        ])
    };
    Container {
        name: "fill".into(),
        image: Some(image),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["tokenscale-engine".into()]),
        args: Some(vec!["pull".into(), md.spec.model.source.clone()]),
        env: Some(env),
        resources: Some(ResourceRequirements {
            requests: Some(quantities("500m", "512Mi")),
            limits: Some(quantities("2", "2Gi")),
            ..Default::default()
        }),
        security_context: Some(container_security_context()),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "tmp".into(),
                mount_path: "/tmp".into(),
                ..Default::default()
            },
            VolumeMount {
                name: FILLED_VOLUME.into(),
                mount_path: HF_HOME_PATH.into(),
                read_only: Some(false),
                ..Default::default()
            },
        ]),
        ..Default::default()
    }
}

/// Where a fill Job stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FillState {
    /// Not finished (or not started): replicas wait.
    Filling,
    /// Succeeded: replicas may start.
    Filled,
    /// Out of retries: the Job's own reason and message.
    Failed(String),
}

/// Reads a Job's status.
pub fn fill_state(status: Option<&JobStatus>) -> FillState {
    let Some(status) = status else {
        return FillState::Filling;
    };
    if status.succeeded.unwrap_or(0) > 0 {
        return FillState::Filled;
    }
    let failed = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True");
    match failed {
        Some(c) => FillState::Failed(format!(
            "{}: {}",
            c.reason.as_deref().unwrap_or("Failed"),
            c.message.as_deref().unwrap_or("the fill Job failed")
        )),
        None => FillState::Filling,
    }
}

/// The filled claim's volume and its read-only mount at the Hugging Face cache, for engine
/// pods of a model whose cache is filled (the per-pod `model-cache` stays beneath it, writable,
/// for the engines' compile caches).
pub fn filled_mount(md: &ModelDeployment) -> Option<(Volume, VolumeMount)> {
    fill_spec(md)?;
    Some((
        Volume {
            name: FILLED_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(md),
                read_only: Some(true),
            }),
            ..Default::default()
        },
        VolumeMount {
            name: FILLED_VOLUME.into(),
            mount_path: HF_HOME_PATH.into(),
            read_only: Some(true),
            ..Default::default()
        },
    ))
}

#[cfg(test)]
mod tests;
