//! `ModelDeploymentSpec`: what the user asks for — model, engine, replica bounds, SLO, scaling.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Toleration};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
pub use tokenscale_common::engines::EngineKind;

use super::duration::Duration;
use super::resources::EngineResources;
use super::source::MODEL_SOURCE_PATTERN;
use super::status::ModelDeploymentStatus;

/// A model served by a pool of engine replicas, scaled on output tokens/s per GPU against a
/// p95 latency SLO.
// Each `printcolumn(...)` repeats `type_`; clippy reads the macro arguments as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tokenscale.dev",
    version = "v1alpha1",
    kind = "ModelDeployment",
    namespaced,
    shortname = "md",
    category = "tokenscale",
    status = "ModelDeploymentStatus",
    doc = "A model served by engine replicas that tokenscale scales on output tokens/s per GPU \
           against a p95 latency SLO.",
    scale(
        spec_replicas_path = ".spec.replicas.desired",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model.source"),
    printcolumn(name = "Engine", type_ = "string", json_path = ".spec.engine.kind"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".status.desiredReplicas"
    ),
    printcolumn(
        name = "Tokens/s/GPU",
        type_ = "number",
        json_path = ".status.observed.tokensPerSecondPerGpu"
    ),
    printcolumn(
        name = "P95 TTFT",
        type_ = "string",
        json_path = ".status.observed.ttftP95"
    ),
    printcolumn(
        name = "SLO",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"SLOMet\")].status"
    ),
    printcolumn(
        name = "SLO 1h",
        type_ = "number",
        json_path = ".status.slo.attainment.lastHour"
    ),
    printcolumn(name = "Goodput", type_ = "number", json_path = ".status.goodput"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelDeploymentSpec {
    /// The model to serve.
    pub model: ModelSpec,
    /// The engine replicas: image, backend, accelerators and resources.
    #[serde(default)]
    pub engine: EngineSpec,
    /// Bounds on the replica count.
    pub replicas: ReplicaBounds,
    /// The latency objective: p95 time to first token and p95 time per output token.
    pub slo: SloSpec,
    /// How the autoscaler reacts.
    #[serde(default)]
    pub scaling: ScalingSpec,
    /// How a new version (any edit of the pods) replaces the replicas.
    #[serde(default)]
    pub rollout: RolloutSpec,
    /// Who gets GPUs first when the cluster budget is short (higher wins; 0 by default).
    #[serde(default)]
    #[schemars(range(min = 0, max = 1000))]
    pub priority: i32,
}

/// The model and how clients name it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelSpec {
    /// `hf://org/repo[@revision]` (a safetensors checkpoint on the Hugging Face Hub),
    /// `hf://org/repo[@revision]/file.gguf`, `file:///path`, `pvc://claim/path` or an alias
    /// such as `smollm2-135m-instruct`. Engines fetch `hf://` sources into their cache volume.
    #[schemars(pattern(MODEL_SOURCE_PATTERN), length(min = 1, max = 512))]
    pub source: String,
    /// The name clients use in the OpenAI `model` field; defaults to the resource's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"))]
    pub served_name: Option<String>,
    /// Weights format; when absent, the engine tells from the source (a `.gguf` file, or a
    /// checkpoint directory). When given, it is checked against the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<ModelFormat>,
    /// A Secret holding a Hugging Face token, for gated or private `hf://` models: passed to
    /// the engine as `HF_TOKEN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_token_secret: Option<SecretKeyRef>,
    /// Where engines keep fetched models: an emptyDir per pod by default, or a
    /// PersistentVolumeClaim (ReadWriteMany) that replicas share, so a model is downloaded once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ModelCache>,
    /// LoRA adapters (PEFT) each replica serves beside the model, under their own names:
    /// loaded at start (`tokenscale` engines only). More can be loaded at run time through
    /// the engine's `POST /v1/load_lora_adapter`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub adapters: Vec<AdapterSpec>,
}

/// A LoRA adapter served beside the model.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdapterSpec {
    /// The name clients put in the OpenAI `model` field for this adapter.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"))]
    pub name: String,
    /// A PEFT adapter folder (`adapter_config.json` + `adapter_model.safetensors`):
    /// `hf://org/repo[@revision]`, fetched by the engine into its cache, or `file:///path` in
    /// the image or a volume the pod mounts.
    #[schemars(
        pattern(r"^(file:///[^\s]+|hf://[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._-]+)?)$"),
        length(min = 1, max = 512)
    )]
    pub source: String,
}

impl AdapterSpec {
    /// The engine's `--lora NAME=SOURCE` value: a `file://` source as its path.
    pub fn lora_flag(&self) -> String {
        let source = self.source.strip_prefix("file://").unwrap_or(&self.source);
        format!("{}={source}", self.name)
    }
}

/// Weights file format.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModelFormat {
    /// GGUF (llama.cpp's format), quantised or not.
    Gguf,
    /// Hugging Face safetensors (config.json, safetensors shards, tokenizer files).
    Safetensors,
}

/// A key of a Secret in the ModelDeployment's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key holding the token (default `token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The engines' model cache volume.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelCache {
    /// A PersistentVolumeClaim shared by the replicas instead of an emptyDir per pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Size limit of the per-pod emptyDir (default `50Gi`; a 70B bf16 model needs ~150Gi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"))]
    pub size_limit: Option<String>,
    /// The operator creates a claim (`<name>-engine-cache`) and fills it with the `hf://`
    /// model by a Job (`tokenscale-engine pull`) before the first replica starts; replicas
    /// then mount it read-only as their Hugging Face cache. Not with `claimName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fill: Option<bool>,
    /// Storage the filled claim requests (default `50Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"))]
    pub size: Option<String>,
    /// StorageClass of the filled claim (default: the cluster's default class). A node-local
    /// class (local-path, TopoLVM) gives a node-local cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,
    /// Access mode of the filled claim: `ReadWriteMany` (default: replicas on any node) or
    /// `ReadWriteOnce` (one node's volume: replicas land where it is attached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_mode: Option<CacheAccessMode>,
}

/// Access mode of the claim the operator fills.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheAccessMode {
    /// Mounted by replicas on any node (NFS, CephFS, a cloud file store).
    #[default]
    ReadWriteMany,
    /// Mounted on one node at a time (a block or node-local volume).
    ReadWriteOnce,
}

impl CacheAccessMode {
    /// The claim's `accessModes` entry.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadWriteMany => "ReadWriteMany",
            Self::ReadWriteOnce => "ReadWriteOnce",
        }
    }
}

impl ModelCache {
    /// True when the operator is asked to create and fill the cache claim.
    pub fn fills(&self) -> bool {
        self.fill == Some(true)
    }
}

/// Which compute backend an engine replica runs.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// CPU reference backend (laptops, CI).
    Cpu,
    /// NVIDIA GPUs through CUDA.
    #[default]
    Cuda,
    /// Simulated step times, no weights (control-plane tests; always labelled simulated).
    Sim,
}

impl Backend {
    /// The engine's `--backend` flag value.
    pub fn as_flag(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Sim => "sim",
        }
    }
}

/// The engine replicas.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self.backend == 'cuda' || !has(self.gpusPerReplica) || self.gpusPerReplica == 0").message("gpusPerReplica must be 0 or unset unless backend is cuda"))]
#[x_kube(validation = Rule::new("(has(self.kind) && self.kind != 'tokenscale') || !has(self.gpusPerReplica) || self.gpusPerReplica <= 1").message("tokenscale's engine uses one GPU per replica (no tensor parallelism yet): set gpusPerReplica to 1, or kind vllm or sglang to split the model over several GPUs"))]
pub struct EngineSpec {
    /// Which engine the replicas run: `tokenscale` (this project's engine), `vllm`, `sglang`
    /// or `llamacpp`. The operator renders the container the way that engine deploys; the
    /// gateway and the autoscaler work the same in front of each.
    #[serde(default)]
    pub kind: EngineKind,
    /// Container image; unset: a default per kind (this release's engine image for the
    /// backend for `tokenscale`, a pinned upstream image for the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// The program to run instead of the kind's own (the container's command in a cluster; a
    /// local binary such as `llama-server` under `tokenscale up`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub command: Option<Vec<String>>,
    /// Compute backend.
    #[serde(default)]
    pub backend: Backend,
    /// GPUs per replica (`nvidia.com/gpu`); 1 by default for `cuda`, 0 otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 16))]
    pub gpus_per_replica: Option<u32>,
    /// CPU and memory requests/limits; unset values take defaults for the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<EngineResources>,
    /// Most sequences in one batch (engine flag `--max-num-seqs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub max_num_seqs: Option<u32>,
    /// Token budget of one engine step (engine flag `--max-batch-tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16, max = 1048576))]
    pub max_batch_tokens: Option<u32>,
    /// Fraction of GPU memory the engine may use, the KV cache sized from what is left after
    /// the weights (CUDA engine flag `--gpu-memory-utilization`; ignored on cpu and sim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.05, max = 0.99))]
    pub kv_cache_fraction: Option<f64>,
    /// Longest sequence (prompt plus output) one request may have, in tokens; unset: the
    /// model's own context length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16, max = 10485760))]
    pub max_model_len: Option<u32>,
    /// Extra engine arguments (the engine's own flags), appended after the ones the operator
    /// sets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables for the engine container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Node labels the engine pods must match (e.g. a GPU product).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the engine pods tolerate (e.g. `nvidia.com/gpu`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// How long a replica being removed may keep finishing its streams before it is killed.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout: Duration,
}

impl Default for EngineSpec {
    fn default() -> Self {
        Self {
            kind: EngineKind::default(),
            image: None,
            command: None,
            backend: Backend::default(),
            gpus_per_replica: None,
            resources: None,
            max_num_seqs: None,
            max_batch_tokens: None,
            kv_cache_fraction: None,
            max_model_len: None,
            args: Vec::new(),
            env: Vec::new(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            drain_timeout: default_drain_timeout(),
        }
    }
}

/// The engine image of this release for the cpu and sim backends (docker/engine.Dockerfile).
pub const DEFAULT_IMAGE: &str = concat!("tokenscale/engine:", env!("CARGO_PKG_VERSION"));
/// The engine image of this release built on the CUDA 12.9 runtime base, for `cuda`.
pub const DEFAULT_CUDA_IMAGE: &str =
    concat!("tokenscale/engine:", env!("CARGO_PKG_VERSION"), "-cuda12.9");

/// vLLM's OpenAI server image, pinned to a release whose metric names the adapter reads.
pub const DEFAULT_VLLM_IMAGE: &str = "vllm/vllm-openai:v0.11.0";
/// SGLang's image, pinned.
pub const DEFAULT_SGLANG_IMAGE: &str = "lmsysorg/sglang:v0.5.5";
/// llama.cpp's server image built with CUDA, pinned to one build.
pub const DEFAULT_LLAMACPP_CUDA_IMAGE: &str = "ghcr.io/ggml-org/llama.cpp:server-cuda-b7869";
/// llama.cpp's CPU server image, the same build.
pub const DEFAULT_LLAMACPP_IMAGE: &str = "ghcr.io/ggml-org/llama.cpp:server-b7869";

impl EngineSpec {
    /// The image to run: the explicit one, else the default of the kind for the backend (our
    /// engine's CUDA libraries are only in the `-cuda12.9` build; llama.cpp has a CPU and a
    /// CUDA image).
    pub fn image(&self) -> &str {
        if let Some(image) = &self.image {
            return image;
        }
        match (self.kind, self.backend) {
            (EngineKind::Tokenscale, Backend::Cuda) => DEFAULT_CUDA_IMAGE,
            (EngineKind::Tokenscale, Backend::Cpu | Backend::Sim) => DEFAULT_IMAGE,
            (EngineKind::Vllm, _) => DEFAULT_VLLM_IMAGE,
            (EngineKind::Sglang, _) => DEFAULT_SGLANG_IMAGE,
            (EngineKind::Llamacpp, Backend::Cuda) => DEFAULT_LLAMACPP_CUDA_IMAGE,
            (EngineKind::Llamacpp, Backend::Cpu | Backend::Sim) => DEFAULT_LLAMACPP_IMAGE,
        }
    }

    /// GPUs one replica uses: the explicit value, else 1 for `cuda` and 0 for the others.
    pub fn gpus_per_replica(&self) -> u32 {
        self.gpus_per_replica.unwrap_or(match self.backend {
            Backend::Cuda => 1,
            Backend::Cpu | Backend::Sim => 0,
        })
    }
}

/// Bounds on the replica count.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self.min <= self.max").message("replicas.min must be less than or equal to replicas.max"))]
#[x_kube(validation = Rule::new("!has(self.desired) || (self.desired >= self.min && self.desired <= self.max)").message("replicas.desired (what kubectl scale sets) must be within replicas.min and replicas.max"))]
pub struct ReplicaBounds {
    /// Fewest replicas; 0 allows scale to zero after `scaleToZeroAfter` without traffic.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 0, max = 1000))]
    pub min: i32,
    /// Most replicas.
    #[schemars(range(min = 1, max = 1000))]
    pub max: i32,
    /// A replica count a person set (`kubectl scale`, the `scale` subresource): while set, the
    /// autoscaler holds it and says so in the `Scaling` condition; remove it to resume
    /// autoscaling. Within `min` and `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub desired: Option<i32>,
    /// Idle time after which a model with `min: 0` goes to zero replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_to_zero_after: Option<Duration>,
}

/// How a new version replaces the replicas: the engine Deployment's rolling-update bounds,
/// under Kubernetes' names. Each is a count or a percentage of the replicas (`maxSurge`
/// rounded up, `maxUnavailable` down); they may not both be zero.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// Pods a rollout may run above the replica count. Default 0: a rollout never needs a
    /// GPU the replicas do not already hold, so it completes on a full cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Replicas a rollout may take down at once (and the PodDisruptionBudget lets a drain
    /// take). Default 1: one replica's capacity at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

impl RolloutSpec {
    /// `maxSurge`, 0 when unset.
    pub fn max_surge(&self) -> IntOrString {
        self.max_surge.clone().unwrap_or(IntOrString::Int(0))
    }

    /// `maxUnavailable`, 1 when unset.
    pub fn max_unavailable(&self) -> IntOrString {
        self.max_unavailable.clone().unwrap_or(IntOrString::Int(1))
    }
}

/// The latency objective, held at p95.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SloSpec {
    /// p95 time to first token, e.g. "500ms".
    pub ttft_p95: Duration,
    /// p95 time per output token after the first, e.g. "50ms".
    pub tpot_p95: Duration,
}

/// How the autoscaler reacts to demand.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalingSpec {
    /// Fraction of a replica's capacity at the SLO to plan for (headroom for bursts).
    #[serde(default = "default_target_utilization")]
    #[schemars(range(min = 0.1, max = 1.0))]
    pub target_utilization: f64,
    /// Window over which demand is averaged for normal decisions.
    #[serde(default = "default_stable_window")]
    pub stable_window: Duration,
    /// Short window that reacts to bursts.
    #[serde(default = "default_panic_window")]
    pub panic_window: Duration,
    /// A scale-down goes only to the highest count recommended within this window (HPA's
    /// scale-down stabilisation). Demand is already a `stableWindow` mean, so one window of
    /// memory on top is enough to stop flapping.
    #[serde(default = "default_scale_down_stabilization")]
    pub scale_down_stabilization: Duration,
    /// Most a scale-up may multiply the replica count by in one step (≥ 1).
    #[serde(default = "default_max_scale_up_rate")]
    #[schemars(range(min = 1.0, max = 100.0))]
    pub max_scale_up_rate: f64,
    /// Most replicas one scale-down step may remove, as a fraction of the current count
    /// (at least one replica per step).
    #[serde(default = "default_max_scale_down_rate")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub max_scale_down_rate: f64,
    /// Starting estimate of output tokens/s one GPU sustains at the SLO, before it is learned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 10000000.0))]
    pub initial_tokens_per_second_per_gpu: Option<f64>,
    /// How often the autoscaler decides.
    #[serde(default = "default_period")]
    pub period: Duration,
    /// How long a new replica is expected to take from being asked for to serving (GPU
    /// scheduling, image pull, weight download, load, warm-up): the lead time the autoscaler
    /// plans a rise with until it has measured this model's own starts (`status.leadTime`).
    /// Default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_time: Option<Duration>,
}

impl Default for ScalingSpec {
    fn default() -> Self {
        Self {
            target_utilization: default_target_utilization(),
            stable_window: default_stable_window(),
            panic_window: default_panic_window(),
            scale_down_stabilization: default_scale_down_stabilization(),
            max_scale_up_rate: default_max_scale_up_rate(),
            max_scale_down_rate: default_max_scale_down_rate(),
            initial_tokens_per_second_per_gpu: None,
            period: default_period(),
            startup_time: None,
        }
    }
}

fn default_min_replicas() -> i32 {
    1
}
fn default_target_utilization() -> f64 {
    0.8
}
fn default_max_scale_up_rate() -> f64 {
    2.0
}
fn default_max_scale_down_rate() -> f64 {
    0.25
}
fn duration(text: &str) -> Duration {
    // Defaults are literals checked by the unit test `defaults_parse`; a bad literal would be
    // a programming error caught there, so falling back to zero is never reached in practice.
    text.parse()
        .unwrap_or_else(|_| Duration::from_std(std::time::Duration::ZERO))
}
fn default_drain_timeout() -> Duration {
    duration("120s")
}
fn default_stable_window() -> Duration {
    duration("60s")
}
fn default_scale_down_stabilization() -> Duration {
    duration("60s")
}
fn default_panic_window() -> Duration {
    duration("6s")
}
fn default_period() -> Duration {
    duration("15s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse() {
        assert_eq!(default_drain_timeout().as_secs_f64(), 120.0);
        assert_eq!(default_stable_window().as_secs_f64(), 60.0);
        assert_eq!(default_scale_down_stabilization().as_secs_f64(), 60.0);
        assert_eq!(default_panic_window().as_secs_f64(), 6.0);
        assert_eq!(default_period().as_secs_f64(), 15.0);
    }

    #[test]
    fn gpus_default_by_backend() {
        let mut engine = EngineSpec::default();
        assert_eq!(engine.gpus_per_replica(), 1);
        engine.backend = Backend::Cpu;
        assert_eq!(engine.gpus_per_replica(), 0);
        engine.backend = Backend::Cuda;
        engine.gpus_per_replica = Some(4);
        assert_eq!(engine.gpus_per_replica(), 4);
    }
}
