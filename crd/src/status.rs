//! `ModelDeploymentStatus`: what the operator observed and decided, and the three conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use tokenscale_scaling::autoscaler::PolicySnapshot;
use tokenscale_scaling::scaling::attainment::SloHistory;

/// Condition type: at least one replica serves (or the model is scaled to zero on purpose).
pub const CONDITION_READY: &str = "Ready";
/// Condition type: the replica count is moving toward the desired count.
pub const CONDITION_SCALING: &str = "Scaling";
/// Condition type: observed p95 TTFT and TPOT are within the SLO.
pub const CONDITION_SLO_MET: &str = "SLOMet";
/// Condition type: the served name is already served by an older ModelDeployment in another
/// namespace; this one is refused (no children, no traffic).
pub const CONDITION_CONFLICT: &str = "Conflict";

/// What the operator last saw and did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelDeploymentStatus {
    /// Replicas the engine Deployment has (ready or not).
    #[serde(default)]
    pub replicas: i32,
    /// Replicas that pass their readiness probe.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Replicas the autoscaler wants now.
    #[serde(default)]
    pub desired_replicas: i32,
    /// Label selector of the engine pods (for the `scale` subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Demand and latency measured over the stable window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedLoad>,
    /// The current estimate of what one replica sustains within the SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityEstimate>,
    /// The last scaling decision and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<LastDecision>,
    /// `Ready`, `Scaling` and `SLOMet`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The model the replicas serve: for `hf://` sources, the commit the revision resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelStatus>,
    /// How often the SLO was met, and the minute-by-minute record behind it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloStatus>,
    /// Output tokens/s per GPU served within the SLO over the last hour (tokens of minutes
    /// that met it, over the GPUs held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// The autoscaler's memory (learned capacity, windows, panic), so that a new leader
    /// carries on where the last one stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<PolicySnapshot>,
    /// Pods the last scale-in marked with a low `pod-deletion-cost`; a later scale-in clears
    /// the marks of those that stayed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marked_for_removal: Vec<String>,
    /// The longest of the latest measured cold starts (a replica asked for until it is
    /// ready): the gateway holds a request for this model at zero replicas that long plus the
    /// TTFT SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start: Option<crate::Duration>,
    /// The latest measured cold starts, oldest first (at most 20), carried so that a new
    /// leader plans with the same lead time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cold_starts: Vec<crate::Duration>,
    /// The time to capacity the autoscaler plans rises with: the 90th percentile of
    /// `coldStarts`, or `spec.scaling.startupTime` (default 60s) until a start is measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_time: Option<crate::Duration>,
    /// The most recent measured start split into its phases, from the pod's conditions
    /// (a single start, not a median: its phases then add up to what it took).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start_phases: Option<ColdStartPhases>,
    /// The longest phase of `coldStartPhases`: `scheduling`, `imagePull`, `fetch`, `load` or
    /// `warmup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowest_start_phase: Option<String>,
    /// The concurrency cap the replicas run under, when they report one: the engine's own
    /// running-sequence limit (under a TPOT target, the batch its step time allows) or the
    /// gateway's adaptive in-flight cap per replica. Where every replica runs at it with
    /// requests waiting, capacity is read there (the knee) rather than found by breaking the
    /// SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_cap: Option<ConcurrencyCapStatus>,
}

/// The replicas' concurrency caps, over those that report one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConcurrencyCapStatus {
    /// Who sets it: `engine` (`tokenscale_engine_max_num_seqs`) or `gateway`
    /// (`tokenscale_gateway_replica_concurrency_limit`).
    pub source: String,
    /// Replicas reporting a cap.
    pub replicas: u32,
    /// Their mean cap (running sequences, or requests in flight), per replica.
    pub per_replica: f64,
    /// Their mean running sequences (or requests in flight), per replica.
    pub in_use_per_replica: f64,
    /// How many of them run at their cap now.
    pub at_cap: u32,
}

/// One replica's start by phase (see `clock::start_phases`); a phase whose bounds the
/// pod does not show yet is absent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ColdStartPhases {
    /// Waiting for a node (and its GPU): created until `PodScheduled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<crate::Duration>,
    /// Pulling the image and starting the containers (init containers included):
    /// scheduled until the last container's `startedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull: Option<crate::Duration>,
    /// Fetching the weights (from the Hub or the cache): the engine's own figure, when it
    /// reports its start phases (tokenscale's engine does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch: Option<crate::Duration>,
    /// Loading the weights (parsed, quantised or uploaded) when the engine reports its start
    /// phases; otherwise fetching, loading and warming up together: started until `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<crate::Duration>,
    /// Warming up and becoming ready when the engine reports its start phases: the rest of
    /// started until `Ready` after `fetch` and `load` (the first forward pass, and the
    /// readiness probe noticing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<crate::Duration>,
}

/// The SLO's record over time (see `controller::attainment` for how a minute is judged).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SloStatus {
    /// Share of minutes whose p95 TTFT and p95 TPOT both met their targets.
    #[serde(default)]
    pub attainment: SloAttainment,
    /// The per-minute (last hour) and per-hour (last day) record attainment is read from.
    #[serde(default)]
    pub history: SloHistory,
}

/// Share (0–1) of judged minutes that met the SLO; absent when none was judged.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SloAttainment {
    /// Over the last hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_hour: Option<f64>,
    /// Over the last day.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "last24h")]
    pub last_24h: Option<f64>,
}

/// What the replicas serve.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    /// `spec.model.source` as served.
    pub source: String,
    /// The Hub commit every replica reported (an `hf://` source's resolved revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// When replicas report different commits (a branch moved between their starts): all of
    /// them. Pin `@COMMIT` in the source to rule this out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mixed_revisions: Vec<String>,
}

/// Demand and latency over the stable window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedLoad {
    /// Output tokens/s across all replicas.
    pub tokens_per_second: f64,
    /// Output tokens/s divided by the GPUs of ready replicas (by replicas on CPU).
    pub tokens_per_second_per_gpu: f64,
    /// Finished requests/s.
    pub requests_per_second: f64,
    /// p95 time to first token, e.g. "412ms"; absent without traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p95: Option<String>,
    /// p95 time per output token, e.g. "31ms"; absent without traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p95: Option<String>,
    /// Requests waiting (in the gateway and the engines).
    pub queue: u64,
}

/// What one replica is believed to sustain within the SLO.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityEstimate {
    /// Output tokens/s per replica.
    pub tokens_per_second_per_replica: f64,
    /// Where the figure comes from (e.g. "hint", "learned").
    pub source: String,
}

/// One scaling decision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastDecision {
    /// Replicas decided.
    pub replicas: i32,
    /// Why, in words.
    pub reason: String,
    /// When.
    pub time: Time,
}

impl ModelDeploymentStatus {
    /// The condition of `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}
