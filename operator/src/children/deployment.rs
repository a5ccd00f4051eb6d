//! The engine `Deployment` of a `ModelDeployment`: a hardened pod running
//! `tokenscale-engine serve`, with GPUs, probes, graceful drain and the model's volume.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction, Lifecycle,
    LifecycleHandler, PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, SecurityContext, SleepAction, TCPSocketAction,
    Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::resources::{GPU_RESOURCE, engine_resources};
use super::{
    ChildError, ENGINE_PORT, ENGINE_PORT_NAME, child_metadata, common_labels, selector_labels,
    served_name,
};
use crate::crd::{Backend, ModelDeployment, ModelSource};

/// Seconds the pod keeps serving after it is marked for deletion, before SIGTERM: long
/// enough for endpoint removal to reach the gateway so no new request lands on it.
pub const PRE_STOP_SLEEP_S: i64 = 5;
/// Margin on top of pre-stop sleep plus drain before the kubelet kills the engine.
const TERMINATION_MARGIN_S: i64 = 10;
/// Where the PVC holding the model is mounted (read-only).
pub const MODEL_MOUNT_PATH: &str = "/models";
/// Writable cache the engine fetches `hf://` and alias sources into.
pub const CACHE_MOUNT_PATH: &str = "/var/cache/tokenscale";
/// Non-root user the engine runs as (distroless "nonroot").
const RUN_AS_USER: i64 = 65532;

/// The engine Deployment for `md` at `replicas` replicas. Pure: same input, same object.
///
/// `md` must carry `metadata.name`, `namespace` and `uid` (it was read from the API server).
pub fn engine_deployment(md: &ModelDeployment, replicas: i32) -> Result<Deployment, ChildError> {
    let source = ModelSource::parse(&md.spec.model.source)
        .map_err(|e| ChildError::InvalidSpec(e.to_string()))?;
    let metadata = child_metadata(md)?;
    let drain_s = md
        .spec
        .engine
        .drain_timeout
        .get()
        .as_secs()
        .try_into()
        .unwrap_or(i64::MAX / 2);
    let pod = PodSpec {
        containers: vec![engine_container(md, &source)],
        volumes: Some(volumes(&source)),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS_USER),
            run_as_group: Some(RUN_AS_USER),
            fs_group: Some(RUN_AS_USER),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..Default::default()
        }),
        // Streams in flight must finish: pre-stop sleep, then the engine drains on SIGTERM.
        termination_grace_period_seconds: Some(PRE_STOP_SLEEP_S + drain_s + TERMINATION_MARGIN_S),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        node_selector: non_empty_map(&md.spec.engine.node_selector),
        tolerations: tolerations(md),
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
            // GPUs are scarce: never take a replica down before its successor is ready.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            revision_history_limit: Some(3),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(common_labels(md)),
                    annotations: Some(BTreeMap::from([
                        ("prometheus.io/scrape".to_string(), "true".to_string()),
                        ("prometheus.io/port".to_string(), ENGINE_PORT.to_string()),
                        ("prometheus.io/path".to_string(), "/metrics".to_string()),
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
        // The engine resolves and fetches these into its (writable) cache directory.
        ModelSource::HuggingFace { .. } | ModelSource::Alias(_) => source.to_string(),
    }
}

/// `tokenscale-engine serve` arguments for `md`: the basic flags, the served name and drain
/// time (so the engine's own names and grace agree with the pod's), tuning, then `args`.
pub fn engine_args(md: &ModelDeployment, source: &ModelSource) -> Vec<String> {
    let engine = &md.spec.engine;
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--model".into(),
        model_argument(source),
        "--host".into(),
        "0.0.0.0".into(),
        "--port".into(),
        ENGINE_PORT.to_string(),
        "--backend".into(),
        engine.backend.as_flag().into(),
        "--served-model-name".into(),
        served_name(md),
        "--drain-timeout".into(),
        engine.drain_timeout.get().as_secs_f64().to_string(),
    ];
    // The KV-cache share of device memory is the CUDA engine's `--gpu-memory-utilization`;
    // CPU and sim engines size their cache in tokens and have no such flag.
    let kv_fraction = engine
        .kv_cache_fraction
        .filter(|_| engine.backend == Backend::Cuda);
    let tuning = [
        ("--max-num-seqs", engine.max_num_seqs.map(|v| v.to_string())),
        (
            "--max-batch-tokens",
            engine.max_batch_tokens.map(|v| v.to_string()),
        ),
        (
            "--gpu-memory-utilization",
            kv_fraction.map(|v| v.to_string()),
        ),
    ];
    for (flag, value) in tuning {
        if let Some(value) = value {
            args.extend([flag.to_string(), value]);
        }
    }
    args.extend(engine.args.iter().cloned());
    args
}

fn engine_container(md: &ModelDeployment, source: &ModelSource) -> Container {
    let http = || IntOrString::String(ENGINE_PORT_NAME.into());
    let health = |period_s, failures| Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/health".into()),
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
    ];
    env.extend(md.spec.engine.env.iter().cloned());
    Container {
        name: "engine".into(),
        image: Some(md.spec.engine.image().to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["tokenscale-engine".into()]),
        args: Some(engine_args(md, source)),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some(ENGINE_PORT_NAME.into()),
            container_port: ENGINE_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        resources: Some(engine_resources(&md.spec.engine)),
        // Loading (and fetching) a model can take minutes: up to 15 before the pod is failed.
        startup_probe: Some(health(10, 90)),
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
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: PRE_STOP_SLEEP_S,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        security_context: Some(container_security_context()),
        volume_mounts: Some(volume_mounts(source)),
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

fn volumes(source: &ModelSource) -> Vec<Volume> {
    let empty_dir = |name: &str, size: &str| Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(size.into())),
            ..Default::default()
        }),
        ..Default::default()
    };
    // The root filesystem is read-only: /tmp and the model cache are the only writable places.
    let mut volumes = vec![empty_dir("tmp", "1Gi"), empty_dir("model-cache", "50Gi")];
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

fn volume_mounts(source: &ModelSource) -> Vec<VolumeMount> {
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
