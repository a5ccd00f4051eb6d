//! The gateway's YAML configuration: models and their upstreams, tenants, keys and limits.
//!
//! This module is the file's syntax and defaults: unknown fields and mistyped values are
//! refused here with their line; each concept checks the values of its own section
//! (`validate_section`), and the loader above the layers (`load.rs`) runs every check, so
//! `Config::from_yaml` and `Config::load` never hand out an unchecked configuration.
//! Tenants are reloaded on change by `auth`.

mod cidr;
mod error;
mod routes;
mod syntax;
#[cfg(test)]
mod tests;

pub use cidr::Cidr;
pub use error::{ConfigError, first_failed};
pub use routes::{RouteConfig, TargetConfig};
pub use syntax::{Location, parse_key_hash, parse_location};

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;
use tokenscale_common::engines::EngineKind;

use crate::vocab::LimitKind;

/// The whole `gateway.yaml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Models this gateway routes, with their replicas or discovery source.
    #[serde(default)]
    pub models: Vec<ModelConfig>,
    /// Routes: names that stand for several models, with weights and fallbacks.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// Tenants, their keys and limits (may instead come from `tenants_file`).
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// Tenant name used for requests without a key; `null` refuses them.
    #[serde(default)]
    pub anonymous: Option<Spanned<String>>,
    /// `true`: a key no tenant owns is the `anonymous` tenant's too, as a local server without
    /// keys takes any key (the official OpenAI clients always send one). For a run on one
    /// machine (`tokenscale up` sets it); needs `anonymous`. Malformed credentials stay 401.
    #[serde(default)]
    pub anonymous_any_key: Option<Spanned<bool>>,
    /// A separate file with `tenants:` and `anonymous:` (a mounted Secret in a cluster);
    /// relative to the config file. Replaces the inline tenants when set.
    #[serde(default)]
    pub tenants_file: Option<PathBuf>,
    /// How often the tenants' file is checked for changes, in milliseconds.
    #[serde(default = "defaults::reload_interval_ms")]
    pub reload_interval_ms: u64,
    /// Largest accepted request body, in bytes (413 above).
    #[serde(default = "defaults::max_body_bytes")]
    pub max_body_bytes: usize,
    /// Time a client connection may take to send a request's headers, including the idle
    /// wait for the next request on a keep-alive connection; the connection is closed after.
    #[serde(default = "defaults::client_header_timeout_ms")]
    pub client_header_timeout_ms: u64,
    /// A client connection with no request open for this long is closed gracefully
    /// (GOAWAY on HTTP/2, which the header timeout does not cover), in milliseconds.
    #[serde(default = "defaults::client_idle_timeout_ms")]
    pub client_idle_timeout_ms: u64,
    /// A response write that makes no progress for this long (the client stopped reading:
    /// its socket is full) cuts the connection, which cancels the engine request and frees
    /// its slots, in milliseconds.
    #[serde(default = "defaults::stream_write_timeout_ms")]
    pub stream_write_timeout_ms: u64,
    /// Proxies (CIDR blocks or addresses) whose `X-Forwarded-For` names the client: the
    /// right-most address in it that is not itself a trusted proxy. Empty: the client is
    /// always the TCP peer, and `X-Forwarded-For` is ignored.
    #[serde(default)]
    pub trusted_proxies: Vec<Cidr>,
    /// Admission queue settings.
    #[serde(default)]
    pub queue: QueueConfig,
    /// Token accounting settings.
    #[serde(default)]
    pub tokens: TokenConfig,
    /// Health checking and load scraping of replicas.
    #[serde(default)]
    pub health: HealthConfig,
    /// Upstream call settings.
    #[serde(default)]
    pub upstream: UpstreamConfig,
    /// Kubernetes discovery (`ModelDeployment` objects and their `EndpointSlice`s).
    #[serde(default)]
    pub kubernetes: Option<KubernetesConfig>,
    /// Where tenants' limit buckets (and the gateway pods' shares of capacity) live.
    #[serde(default)]
    pub limits: LimitsStoreConfig,
    /// Caps on what one gateway pod holds at once.
    #[serde(default)]
    pub bounds: BoundsConfig,
    /// HTTP/2 settings of client connections.
    #[serde(default)]
    pub http2: Http2Config,
    /// The Batch API (`/v1/files`, `/v1/batches`): where its jobs and files live.
    #[serde(default)]
    pub batch: BatchConfig,
}

/// The Batch API's stores and how much of the replicas batch lines may take (`batch:`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// `false`: `/v1/files` and `/v1/batches` answer 404 and nothing runs.
    pub enabled: bool,
    /// Local store: job state and (unless `objects` says otherwise) files, on this pod's disk
    /// (a PersistentVolume in a cluster). Absent: `$XDG_DATA_HOME/tokenscale/batch`, else
    /// `~/.local/share/tokenscale/batch`.
    pub dir: Option<PathBuf>,
    /// `local` (default: `dir`) or `redis`: job state and work claims in the Redis of
    /// `limits:`, shared by every gateway pod.
    pub state: BatchStateKind,
    /// Where files go: absent, `dir/objects`; `file:///ABSOLUTE/PATH`; or
    /// `s3://BUCKET/PREFIX` (an S3-compatible store; endpoint, region and credentials from
    /// the usual `AWS_*` environment variables).
    pub objects: Option<String>,
    /// Most of a model's concurrency (this pod's share of its replicas' slots) batch lines
    /// may hold, interactive requests included: the rest stays free for interactive
    /// arrivals. Batch lines never start while interactive requests queue.
    pub max_fill: f64,
    /// Most batch lines this pod runs at once per model.
    pub max_concurrency: u32,
    /// How long a pod's claim on a line lasts unless renewed (a dead pod's lines are taken
    /// over after it), in milliseconds.
    pub lease_ms: u64,
    /// Largest input file, in bytes.
    pub max_file_bytes: usize,
    /// Most lines in a batch.
    pub max_lines: usize,
    /// Longest line, in bytes.
    pub max_line_bytes: usize,
    /// Slowest upload (`POST /v1/files`) kept, in bytes per second over 10 s windows; 0: no
    /// floor.
    pub upload_min_bytes_per_s: u64,
    /// Longest an upload may take, in milliseconds.
    pub upload_timeout_ms: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: None,
            state: BatchStateKind::Local,
            objects: None,
            max_fill: 0.75,
            max_concurrency: 64,
            lease_ms: 60_000,
            max_file_bytes: 200 << 20,
            max_lines: 50_000,
            max_line_bytes: 1 << 20,
            upload_min_bytes_per_s: 64 << 10,
            upload_timeout_ms: 600_000,
        }
    }
}

impl BatchConfig {
    /// Whether nothing says where batches live (the local store in the default folder).
    pub fn is_default_local(&self) -> bool {
        self.dir.is_none() && self.state == BatchStateKind::Local && self.objects.is_none()
    }
}

/// Where batch job state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStateKind {
    /// On this pod's disk.
    #[default]
    Local,
    /// In the Redis of `limits:` (needs `limits.store: redis`).
    Redis,
}

/// A tenant's Batch API limits, apart from its interactive ones (`tenants[].batch:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchLimitsConfig {
    /// Most tokens (estimated prompt plus `max_tokens`) in its unfinished batches; a batch
    /// that would pass it fails at validation with `token_limit_exceeded` (as OpenAI's
    /// enqueued-token limit does), running nothing.
    pub max_enqueued_tokens: Option<u64>,
    /// Most of its batches unfinished at once; creating one more answers 429.
    pub max_batches_in_flight: Option<u32>,
}

/// One model and where its replicas are.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The served model name clients put in `model`.
    pub name: Spanned<String>,
    /// Static replica base URLs (`http://host:port` for HTTP/1.1, `h2c://host:port` for
    /// HTTP/2 without TLS).
    #[serde(default)]
    pub upstreams: Vec<Spanned<String>>,
    /// `static` (default: `upstreams` plus the programmatic registry) or `kubernetes`.
    #[serde(default)]
    pub discovery: Discovery,
    /// Concurrent requests per replica before requests queue.
    #[serde(default = "defaults::replica_concurrency")]
    pub replica_concurrency: u32,
    /// Leading prompt characters hashed for prefix affinity (0 turns affinity off).
    #[serde(default = "defaults::affinity_prefix_chars")]
    pub affinity_prefix_chars: usize,
    /// Whether replicas expose vLLM-style `/metrics` to scrape (turn off for servers that
    /// do not, or they would always count as stale, that is full).
    #[serde(default = "defaults::yes")]
    pub scrape_metrics: bool,
    /// The engine the static upstreams run (`tokenscale`, `vllm`, `sglang`, `llamacpp`):
    /// how a request's class reaches them. Kubernetes discovery reads it from the
    /// `ModelDeployment` instead.
    #[serde(default)]
    pub engine: EngineKind,
    /// The flags those upstreams were started with, as far as priority goes: vLLM gets the
    /// body's `priority` under `--scheduling-policy priority`, SGLang under
    /// `--enable-priority-scheduling` (`--schedule-low-priority-values-first` and
    /// `--disable-priority-preemption` read too); without them, pacing only.
    #[serde(default)]
    pub engine_args: Vec<String>,
    /// The latency SLO the gateway holds for the static upstreams by capping each one's
    /// requests in flight adaptively (absent: no cap but `replica_concurrency`).
    #[serde(default)]
    pub slo: Option<ModelSlo>,
    /// LoRA adapters its replicas serve beside it under their own names (our engine's
    /// `--lora NAME=SOURCE`, vLLM's `--lora-modules`): a request naming one goes to this
    /// model's replicas, preferring those that hold it. Kubernetes discovery reads them from
    /// the `ModelDeployment`'s `spec.model.adapters` instead.
    #[serde(default)]
    pub adapters: Vec<Spanned<String>>,
}

/// A static model's SLO (`models[].slo`), held by the adaptive in-flight cap per replica.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSlo {
    /// Time per output token, p95, in milliseconds.
    pub tpot_p95_ms: u64,
    /// Time to first token, p95, in milliseconds (absent: TPOT alone).
    #[serde(default)]
    pub ttft_p95_ms: Option<u64>,
}

/// Where a model's replicas come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Discovery {
    /// `upstreams` from this file plus replicas added through the registry handle.
    #[default]
    Static,
    /// Ready endpoints of the model's `ModelDeployment` in the cluster.
    Kubernetes,
}

/// A tenant: who it is, its keys, the models it may use and its limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Tenant name (label on metrics).
    pub name: Spanned<String>,
    /// Key hashes, each `sha256:<64 hex digits>`; plain keys are refused.
    #[serde(default)]
    pub keys: Vec<Spanned<String>>,
    /// Served model names or globs (`*`, `?`) the tenant may use; absent: every model
    /// (warned at load). Any other model answers 404 as if it did not exist.
    #[serde(default)]
    pub models: Option<Vec<Spanned<String>>>,
    /// Limits applied per model to this tenant (absent: unlimited).
    #[serde(default)]
    pub limits: Option<LimitsConfig>,
    /// Limits applied to the tenant across all its models together (absent: none). Its
    /// `requests_per_minute` is checked before the request body is read.
    #[serde(default)]
    pub total_limits: Option<LimitsConfig>,
    /// Most requests of this tenant in flight at once, over all gateway pods (each pod
    /// takes its share); more get 429. Absent: no cap but the pod's.
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// Its Batch API limits (absent: none).
    #[serde(default)]
    pub batch: Option<BatchLimitsConfig>,
}

/// Per-tenant, per-model limits, each a bucket refilling continuously.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Requests per minute.
    pub requests_per_minute: Option<u64>,
    /// Uncached prompt tokens per minute.
    pub input_tokens_per_minute: Option<u64>,
    /// Completion tokens per minute (reserved from `max_tokens`, settled on completion).
    pub output_tokens_per_minute: Option<u64>,
}

impl LimitsConfig {
    /// The quota of `kind` in these limits.
    pub fn quota(&self, kind: LimitKind) -> Option<u64> {
        match kind {
            LimitKind::Requests => self.requests_per_minute,
            LimitKind::InputTokens => self.input_tokens_per_minute,
            LimitKind::OutputTokens => self.output_tokens_per_minute,
        }
    }
}

/// Where limit buckets live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// In this process: right for one gateway pod (each pod has its own buckets).
    #[default]
    Memory,
    /// In Redis, shared by every gateway pod; taken and settled atomically on the server.
    Redis,
}

/// What a pod does while Redis cannot be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreFailure {
    /// Limit in this pod alone, at its share (1/N, N the gateway pods last seen) of each
    /// quota, until Redis answers again.
    #[default]
    Local,
    /// Refuse requests of limited tenants with 503 until Redis answers again.
    Deny,
}

/// Sentinel-managed Redis.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The master's service name.
    pub master: String,
    /// Sentinel addresses (`redis://host:26379`, or `rediss://`).
    pub urls: Vec<Spanned<String>>,
}

/// The limits store (top-level `limits:`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsStoreConfig {
    /// `memory` (default) or `redis`.
    pub store: StoreKind,
    /// One Redis node: `redis://HOST:PORT/DB`, or `rediss://` for TLS.
    pub redis_url: Option<Spanned<String>>,
    /// A Redis Cluster: the seed nodes' URLs (instead of `redis_url`).
    pub redis_cluster_urls: Vec<Spanned<String>>,
    /// Redis behind Sentinel (instead of `redis_url`).
    pub redis_sentinel: Option<SentinelConfig>,
    /// Environment variable holding the Redis password (a mounted Secret), if any.
    pub redis_password_env: String,
    /// Longest wait for one Redis call, in milliseconds; slower counts as a failure.
    pub timeout_ms: u64,
    /// `local` (default) or `deny`: see [`OnStoreFailure`].
    pub on_store_failure: OnStoreFailure,
    /// Prefix of every key the gateway writes.
    pub key_prefix: String,
}

/// Caps on what one gateway pod holds at once.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BoundsConfig {
    /// Open client connections; more are answered 503 and closed at once.
    pub max_connections: usize,
    /// Open connections from one client address (an IPv6 client: its /64); more are
    /// answered 429 and closed at once. Trusted proxies' connections are not counted.
    pub max_connections_per_client: usize,
    /// Requests in flight (from headers read to response end); more get 503.
    pub max_in_flight: usize,
    /// Requests in flight from one client address (the peer, or the one a trusted proxy
    /// forwards for), HTTP/2 streams included; more get 429.
    pub max_in_flight_per_client: usize,
    /// Request body bytes buffered at once over all requests; a request that would go over
    /// gets 503 before more of its body is read.
    pub max_buffered_body_bytes: usize,
}

/// HTTP/2 settings of client connections (h2c, or HTTP/2 behind a TLS terminator).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http2Config {
    /// Streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Interval of keep-alive pings on a connection, in milliseconds.
    pub keep_alive_interval_ms: u64,
    /// A ping unanswered for this long closes the connection, in milliseconds.
    pub keep_alive_timeout_ms: u64,
    /// Largest header list a client may send, in bytes.
    pub max_header_list_bytes: u32,
}

/// The tenants' part of the configuration, as reloaded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantsFile {
    /// Tenants.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// Tenant for keyless requests.
    #[serde(default)]
    pub anonymous: Option<Spanned<String>>,
}

/// Admission queue settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Most requests waiting per model; more get 503.
    pub max_len: usize,
    /// Default deadline of an interactive request, in milliseconds from arrival.
    pub interactive_timeout_ms: u64,
    /// Default deadline of a batch request, in milliseconds from arrival.
    pub batch_timeout_ms: u64,
    /// Largest deadline a client may ask for with `x-tokenscale-deadline-ms`.
    pub max_timeout_ms: u64,
    /// Expected time for a model at zero replicas to get its first ready one, in
    /// milliseconds, when discovery does not say. A request without its own deadline for a
    /// model with no ready replica and a known TTFT SLO (Kubernetes discovery) is held this
    /// long plus the SLO instead of the interactive default (scale from zero).
    pub cold_start_ms: u64,
}

/// Token accounting settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokenConfig {
    /// Output tokens reserved for a request without `max_tokens`.
    pub default_max_tokens: u64,
    /// Prompt characters per token, for the estimate made on arrival.
    pub chars_per_token: f64,
}

/// Health checking and load scraping.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Period of `/health` probes and `/metrics` scrapes per replica, in milliseconds (≤ 1000).
    pub interval_ms: u64,
    /// Scraped load older than this counts as full, in milliseconds.
    pub stale_after_ms: u64,
    /// Probe timeout, in milliseconds.
    pub timeout_ms: u64,
}

/// Upstream call settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Attempts per request (the first plus retries on other replicas).
    pub max_attempts: u32,
    /// Time to wait for a replica's response headers, and then for its whole body (or a
    /// stream's first bytes), in milliseconds; another replica is tried after, 504 when none
    /// is left.
    pub response_timeout_ms: u64,
    /// Longest silence between two chunks of a replica's stream, in milliseconds: past it the
    /// replica counts as hung (ejected until a health probe passes) and the stream continues
    /// on another replica.
    pub stream_idle_timeout_ms: u64,
    /// Continuations of a broken stream on another replica, per request (0: a broken stream
    /// ends with an error event).
    pub max_resumptions: u32,
    /// TCP connect timeout, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Environment variable holding the key engines require (their `--api-key`), presented
    /// as `Authorization: Bearer` on every upstream request; unset: none.
    pub engine_api_key_env: Option<String>,
}

/// Kubernetes discovery settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// Namespaces to watch (empty, with no `namespace`: all namespaces the service account
    /// may list). The chart renders this list when it watches several namespaces.
    pub namespaces: Vec<Spanned<String>>,
    /// One namespace to watch; the single-namespace spelling, merged with `namespaces`.
    pub namespace: Option<Spanned<String>>,
    /// Container port name on the engine endpoints (`http` by default).
    pub port_name: Option<String>,
    /// Which namespaces may claim which served names: namespace (or `*`) → name globs, the
    /// operator's `--served-names` list. A ModelDeployment claiming a name its namespace is
    /// not given gets no traffic. Empty: first come, first served.
    pub served_names: tokenscale_common::served_name::ServedNames,
}

impl KubernetesConfig {
    /// The namespaces to watch, sorted and without repeats; empty means all namespaces.
    pub fn watched_namespaces(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .namespaces
            .iter()
            .chain(&self.namespace)
            .map(|ns| ns.value.clone())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

mod defaults {
    pub fn reload_interval_ms() -> u64 {
        1000
    }
    pub fn max_body_bytes() -> usize {
        4 << 20
    }
    pub fn client_header_timeout_ms() -> u64 {
        30_000
    }
    pub fn client_idle_timeout_ms() -> u64 {
        60_000
    }
    pub fn stream_write_timeout_ms() -> u64 {
        30_000
    }
    pub fn replica_concurrency() -> u32 {
        64
    }
    pub fn affinity_prefix_chars() -> usize {
        256
    }
    pub fn yes() -> bool {
        true
    }
}

impl Default for LimitsStoreConfig {
    fn default() -> Self {
        Self {
            store: StoreKind::Memory,
            redis_url: None,
            redis_cluster_urls: Vec::new(),
            redis_sentinel: None,
            redis_password_env: "TOKENSCALE_REDIS_PASSWORD".into(),
            timeout_ms: 100,
            on_store_failure: OnStoreFailure::Local,
            key_prefix: "tokenscale".into(),
        }
    }
}

impl Default for BoundsConfig {
    fn default() -> Self {
        Self {
            max_connections: 8192,
            // An eighth of the pod each: one address (a NAT, a flood) cannot hold the pod,
            // and a busy client still gets a thousand connections and requests at once.
            max_connections_per_client: 1024,
            max_in_flight: 8192,
            max_in_flight_per_client: 1024,
            max_buffered_body_bytes: 256 << 20,
        }
    }
}

impl Default for Http2Config {
    fn default() -> Self {
        Self {
            max_concurrent_streams: 256,
            keep_alive_interval_ms: 20_000,
            keep_alive_timeout_ms: 20_000,
            max_header_list_bytes: 64 << 10,
        }
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            max_len: 1024,
            interactive_timeout_ms: 30_000,
            batch_timeout_ms: 600_000,
            max_timeout_ms: 3_600_000,
            cold_start_ms: 60_000,
        }
    }
}

impl Default for TokenConfig {
    fn default() -> Self {
        Self {
            default_max_tokens: 256,
            chars_per_token: 4.0,
        }
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            interval_ms: 500,
            stale_after_ms: 2_000,
            timeout_ms: 1_000,
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            response_timeout_ms: 600_000,
            stream_idle_timeout_ms: 15_000,
            // Three: a stream outlives a rolling loss of every replica of a three-replica
            // deployment (each continuation re-reads the prompt and the answer so far once).
            max_resumptions: 3,
            connect_timeout_ms: 2_000,
            engine_api_key_env: None,
        }
    }
}

impl Config {
    /// Parses a configuration text: syntax and defaults only, its values unchecked (the
    /// loader, `Config::from_yaml`, checks them).
    pub(crate) fn parse(text: &str) -> Result<Self, ConfigError> {
        serde_saphyr::from_str(text).map_err(ConfigError::parse)
    }

    /// The file tenants are reloaded from: the tenants file, or the config itself.
    pub fn tenants_path(&self, config_path: &Path) -> PathBuf {
        self.tenants_file
            .clone()
            .unwrap_or_else(|| config_path.to_path_buf())
    }
}

impl TenantsFile {
    /// Parses a tenants file (or a whole config file, whose other fields are ignored here):
    /// syntax only, its tenants unchecked (`TenantsFile::load` in `auth` checks them).
    pub(crate) fn parse(text: &str) -> Result<Self, ConfigError> {
        serde_saphyr::from_str(text).map_err(ConfigError::parse)
    }
}

/// Reads a configuration or tenants file.
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}
