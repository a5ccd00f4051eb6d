//! The engine `Deployment` of a `ModelDeployment`: a hardened pod running the engine of its
//! `engine.kind` (rendered by `engines/`), with GPUs, probes, graceful drain and the model's
//! volume.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction,
    HTTPGetAction, Lifecycle, LifecycleHandler, PersistentVolumeClaimVolumeSource,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecretKeySelector,
    SecurityContext, TCPSocketAction, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::engines::{self, EngineProcess};
use super::resources::{GPU_RESOURCE, engine_resources};
use super::{
    ChildError, ENGINE_PORT, ENGINE_PORT_NAME, child_metadata, common_labels, selector_labels,
};
use crate::{Backend, ModelDeployment, ModelSource};

/// Seconds the pod keeps serving after it is marked for deletion, before it drains: long
/// enough for endpoint removal to reach the gateway so no new request lands on it. Our engine
/// waits them itself after SIGTERM (`--shutdown-delay`); the others' pods run `sleep` in a
/// pre-stop `exec` hook (the `sleep` action is alpha, off by default, in Kubernetes 1.29).
pub const PRE_STOP_SLEEP_S: i64 = 5;
/// Margin on top of pre-stop sleep plus drain before the kubelet kills the engine.
const TERMINATION_MARGIN_S: i64 = 10;
/// Where the PVC holding the model is mounted (read-only).
pub const MODEL_MOUNT_PATH: &str = "/models";
/// Writable cache the engine fetches `hf://` and alias sources into.
pub const CACHE_MOUNT_PATH: &str = "/var/cache/tokenscale";
/// The Hugging Face cache (`HF_HOME`) inside it: the layout `huggingface_hub` uses, so a
/// shared cache volume can be filled by either.
pub const HF_HOME_PATH: &str = "/var/cache/tokenscale/huggingface";
/// Size limit of the per-pod cache emptyDir when the spec sets none.
pub const DEFAULT_CACHE_SIZE: &str = "50Gi";
/// Secret key of the Hub token when the spec names none.
pub const DEFAULT_TOKEN_KEY: &str = "token";
/// Annotation on the engine Deployment saying how its engine learns a request's priority
/// class (its flags, the body's values), or why it gets pacing only.
pub const ANNOTATION_PRIORITY: &str = "tokenscale.dev/priority";
/// Non-root user the engine runs as (distroless "nonroot").
const RUN_AS_USER: i64 = 65532;

/// The engine Deployment for `md` at `replicas` replicas. Pure: same input, same object.
///
/// `md` must carry `metadata.name`, `namespace` and `uid` (it was read from the API server).
pub fn engine_deployment(md: &ModelDeployment, replicas: i32) -> Result<Deployment, ChildError> {
    let source = ModelSource::parse(&md.spec.model.source)
        .map_err(|e| ChildError::InvalidSpec(e.to_string()))?;
    let process = engines::render(md, &source)?;
    let mut metadata = child_metadata(md)?;
    // On the Deployment, not its pods: the outcome in words, which must not roll them.
    metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_PRIORITY.to_string(),
        engines::priority(md).note,
    )]));
    let drain_s = drain_seconds(md);
    let pod = PodSpec {
        containers: vec![engine_container(md, &source, &process)],
        volumes: Some(with_shared_memory(volumes(md, &source), &process)),
        security_context: Some(pod_security_context()),
        // Streams in flight must finish: pre-stop sleep, then the engine drains on SIGTERM.
        termination_grace_period_seconds: Some(PRE_STOP_SLEEP_S + drain_s + TERMINATION_MARGIN_S),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        node_selector: non_empty_map(&md.spec.engine.node_selector),
        tolerations: tolerations(md),
        topology_spread_constraints: Some(super::spread::engine_topology_spread(md)),
        ..Default::default()
    };
    Ok(Deployment {
        metadata,
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(md)),
                ..Default::default()
            },
            // By default a rollout never needs a spare GPU (see `rollout`).
            strategy: Some(super::rollout::strategy(&md.spec.rollout)),
            revision_history_limit: Some(3),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(common_labels(md)),
                    annotations: Some(BTreeMap::from([
                        ("prometheus.io/scrape".to_string(), "true".to_string()),
                        ("prometheus.io/port".to_string(), ENGINE_PORT.to_string()),
                        (
                            "prometheus.io/path".to_string(),
                            process.metrics_path.to_string(),
                        ),
                    ])),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        },
        status: None,
    })
}

/// The `--model` argument: where the engine finds the weights inside its container.
pub fn model_argument(source: &ModelSource) -> String {
    match source {
        ModelSource::File { path } => path.clone(),
        ModelSource::Pvc { path, .. } => format!("{MODEL_MOUNT_PATH}/{path}"),
        // The engine resolves and fetches these into its (writable) cache directory, unchanged:
        // the Hub protocol and the revision are the engine's business.
        ModelSource::HuggingFace(_) | ModelSource::Alias(_) => source.to_string(),
    }
}

fn engine_container(
    md: &ModelDeployment,
    source: &ModelSource,
    process: &EngineProcess,
) -> Container {
    let http = || IntOrString::String(ENGINE_PORT_NAME.into());
    let health = |period_s, failures| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(process.health_path.into()),
            port: http(),
            ..Default::default()
        }),
        period_seconds: Some(period_s),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Default::default()
    };
    let mut env = vec![
        EnvVar {
            name: "XDG_CACHE_HOME".into(),
            value: Some(CACHE_MOUNT_PATH.into()),
            ..Default::default()
        },
        EnvVar {
            name: "HOME".into(),
            value: Some("/tmp".into()),
            ..Default::default()
        },
        EnvVar {
            name: "HF_HOME".into(),
            value: Some(HF_HOME_PATH.into()),
            ..Default::default()
        },
    ];
    env.extend(hf_token_env(md));
    if super::cache::fill_spec(md).is_some() {
        // The filled claim is read-only: the engines read the Hub cache and never the Hub.
        env.push(EnvVar {
            name: "HF_HUB_OFFLINE".into(),
            value: Some("1".into()),
            ..Default::default()
        });
    }
    env.extend(process.cache_env.iter().map(|(name, folder)| EnvVar {
        name: (*name).into(),
        value: Some(format!("{CACHE_MOUNT_PATH}/{folder}")),
        ..Default::default()
    }));
    // `engine.env` overrides what the operator sets: a name listed twice would have the
    // server-side apply refuse the Deployment (env is a list keyed by name).
    let user_env = &md.spec.engine.env;
    env.retain(|ours| !user_env.iter().any(|theirs| theirs.name == ours.name));
    env.extend(user_env.iter().cloned());
    Container {
        name: "engine".into(),
        image: Some(md.spec.engine.image().to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(process.command.clone()),
        args: Some(process.args.clone()),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some(ENGINE_PORT_NAME.into()),
            container_port: ENGINE_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        resources: Some(engine_resources(&md.spec.engine)),
        // Loading (and fetching) a model can take minutes: the engine's budget, 10 s apart.
        startup_probe: Some(health(10, process.startup_failures)),
        // /health is 503 while loading or draining, which takes the pod out of the Service.
        readiness_probe: Some(health(5, 2)),
        // Liveness on the socket only: a draining engine answers 503 on /health and must live.
        liveness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: http(),
                ..Default::default()
            }),
            period_seconds: Some(20),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        lifecycle: pre_stop(md, process),
        security_context: Some(container_security_context()),
        volume_mounts: Some(with_shared_memory_mount(volume_mounts(md, source), process)),
        ..Default::default()
    }
}

/// `HF_TOKEN` from `model.hfTokenSecret`, when one is named.
pub fn hf_token_env(md: &ModelDeployment) -> Option<EnvVar> {
    let secret = md.spec.model.hf_token_secret.as_ref()?;
    Some(EnvVar {
        name: "HF_TOKEN".into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.name.clone(),
                key: secret
                    .key
                    .clone()
                    .unwrap_or_else(|| DEFAULT_TOKEN_KEY.into()),
                // A missing Secret keeps the pod from starting, with the reason in events.
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The pod security context of every pod the operator creates: non-root, RuntimeDefault.
pub fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        run_as_group: Some(RUN_AS_USER),
        fs_group: Some(RUN_AS_USER),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    }
}

/// The restricted-profile security context every tokenscale container gets.
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

/// The pre-stop hook of an engine that does not drain on SIGTERM itself: `sleep` (their
/// images are Debian or Ubuntu based and have it) long enough for the endpoint removal to
/// reach the gateway, plus the whole drain (the pod is out of the Service by then, so only
/// its running streams remain). Ours needs none: it serves on `--shutdown-delay` after
/// SIGTERM, then drains, and its image may be distroless (no `sleep`).
fn pre_stop(md: &ModelDeployment, process: &EngineProcess) -> Option<Lifecycle> {
    if process.drains_on_sigterm {
        return None;
    }
    let seconds = PRE_STOP_SLEEP_S + drain_seconds(md);
    Some(Lifecycle {
        pre_stop: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["sleep".into(), seconds.to_string()]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// `engine.drainTimeout` in whole seconds (bounded so the sums above cannot overflow).
fn drain_seconds(md: &ModelDeployment) -> i64 {
    md.spec
        .engine
        .drain_timeout
        .get()
        .as_secs()
        .try_into()
        .unwrap_or(i64::MAX / 4)
}

/// Name of the memory-backed `/dev/shm` volume.
const SHARED_MEMORY_VOLUME: &str = "dshm";

/// `volumes` plus a memory-backed `/dev/shm` when the engine needs one (counted against the
/// container's memory limit, like any tmpfs).
fn with_shared_memory(mut volumes: Vec<Volume>, process: &EngineProcess) -> Vec<Volume> {
    if let Some(size) = process.shared_memory {
        volumes.push(Volume {
            name: SHARED_MEMORY_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity(size.into())),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    volumes
}

fn with_shared_memory_mount(
    mut mounts: Vec<VolumeMount>,
    process: &EngineProcess,
) -> Vec<VolumeMount> {
    if process.shared_memory.is_some() {
        mounts.push(VolumeMount {
            name: SHARED_MEMORY_VOLUME.into(),
            mount_path: "/dev/shm".into(),
            read_only: Some(false),
            ..Default::default()
        });
    }
    mounts
}

fn volumes(md: &ModelDeployment, source: &ModelSource) -> Vec<Volume> {
    let empty_dir = |name: &str, size: &str| Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(size.into())),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cache = md.spec.model.cache.clone().unwrap_or_default();
    // The root filesystem is read-only: /tmp and the model cache are the only writable places.
    let model_cache = match cache.claim_name {
        // Replicas share one cache: the engine locks each file it downloads.
        Some(claim) => Volume {
            name: "model-cache".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim,
                read_only: Some(false),
            }),
            ..Default::default()
        },
        None => empty_dir(
            "model-cache",
            cache.size_limit.as_deref().unwrap_or(DEFAULT_CACHE_SIZE),
        ),
    };
    let mut volumes = vec![empty_dir("tmp", "1Gi"), model_cache];
    volumes.extend(super::cache::filled_mount(md).map(|(volume, _)| volume));
    if let ModelSource::Pvc { claim, .. } = source {
        volumes.push(Volume {
            name: "model".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: Some(true),
            }),
            ..Default::default()
        });
    }
    volumes
}

fn volume_mounts(md: &ModelDeployment, source: &ModelSource) -> Vec<VolumeMount> {
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..Default::default()
    };
    let mut mounts = vec![
        mount("tmp", "/tmp", false),
        mount("model-cache", CACHE_MOUNT_PATH, false),
    ];
    mounts.extend(super::cache::filled_mount(md).map(|(_, mount)| mount));
    if matches!(source, ModelSource::Pvc { .. }) {
        mounts.push(mount("model", MODEL_MOUNT_PATH, true));
    }
    mounts
}

/// The spec's tolerations, plus the usual `nvidia.com/gpu` taint for GPU replicas.
fn tolerations(md: &ModelDeployment) -> Option<Vec<Toleration>> {
    let mut tolerations = md.spec.engine.tolerations.clone();
    let gpu = md.spec.engine.backend == Backend::Cuda && md.spec.engine.gpus_per_replica() > 0;
    if gpu
        && !tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some(GPU_RESOURCE))
    {
        tolerations.push(Toleration {
            key: Some(GPU_RESOURCE.into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        });
    }
    (!tolerations.is_empty()).then_some(tolerations)
}

fn non_empty_map(map: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then(|| map.clone())
}

#[cfg(test)]
mod tests;
