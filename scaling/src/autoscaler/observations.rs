//! What the policy sees each period: replica counts from the scale target and per-model
//! metrics from the gateway (or engines), already reduced to windowed rates and p95s.

/// A rate measured over the two windows of the policy (see `PolicySpec`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowedRate {
    /// Mean over the stable window (e.g. the last 60 s).
    pub stable: f64,
    /// Mean over the panic window (e.g. the last 6 s).
    pub panic: f64,
}

/// Demand and throughput for one model, summed over all its replicas. Every figure but
/// `batch` is interactive traffic only: Batch API lines run in the same engines, on the
/// capacity interactive traffic leaves, and are reported apart (a metrics source subtracts
/// them from whatever engine figure counts them too).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Demand {
    /// Output tokens generated per second (served throughput), batch lines excluded.
    pub output_tokens_per_s: WindowedRate,
    /// Requests arriving per second at the gateway (offered load, not capped by capacity).
    pub arrival_requests_per_s: WindowedRate,
    /// Mean output tokens of the requests completed in the stable window; `None` if none
    /// completed. Turns arrivals into offered tokens/s.
    pub mean_output_tokens_per_request: Option<f64>,
    /// Requests waiting (gateway queue plus engine waiting queues), now.
    pub queued_requests: u64,
    /// Requests admitted and not finished (running batches), now.
    pub running_requests: u64,
    /// Requests completed in the stable window: tells whether the p95s below mean anything.
    pub completed_requests: u64,
    /// Where the arrivals were read from.
    pub source: DemandSource,
    /// Batch API work on this model (all zero when the gateway exports none: an older
    /// gateway, or engines alone).
    pub batch: BatchDemand,
}

/// What the gateway's running Batch API jobs ask of one model, as it exports them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BatchDemand {
    /// Output tokens/s the model must serve to finish every running batch by its deadline
    /// (the gateway's figure: the most, over the deadlines, of the backlog due by then over
    /// the time left).
    pub required_output_tokens_per_s: f64,
    /// Output tokens the unfinished lines may still generate.
    pub backlog_output_tokens: f64,
    /// Batch output tokens/s generated (served), over the policy's two windows.
    pub output_tokens_per_s: WindowedRate,
    /// Batch lines in flight now (sent to engines, not answered), over all gateway pods.
    pub in_flight_requests: u64,
}

impl BatchDemand {
    /// Whether any batch still has work left.
    pub fn pending(&self) -> bool {
        self.backlog_output_tokens > 0.0 || self.required_output_tokens_per_s > 0.0
    }
}

/// Where a model's arrivals were measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DemandSource {
    /// Counted by the gateway as requests arrive (admitted, queued, or refused for want of
    /// capacity): offered load, not capped by the capacity that exists.
    #[default]
    GatewayArrivals,
    /// No gateway in front: completions read from the engines stand in for arrivals (capped by
    /// capacity; the engines' waiting queues show the rest).
    EngineCompletions,
}

/// Load of one ready replica, for status and for picking which replica to drain.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplicaLoad {
    /// Replica (pod) name.
    pub name: String,
    /// Output tokens/s this replica generated over the stable window.
    pub output_tokens_per_s: f64,
    /// Requests running on it now.
    pub running_requests: u64,
    /// Requests waiting in its own queue now.
    pub waiting_requests: u64,
    /// Share (0–1) of its KV blocks in use.
    pub kv_cache_usage: f64,
}

/// One period's view of a model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observations {
    /// Replicas serving traffic (Ready).
    pub ready_replicas: u32,
    /// Replicas asked for but not Ready yet (starting, pulling, loading the model).
    pub pending_replicas: u32,
    /// The current replica target of the scale target (`spec.replicas` of the Deployment).
    pub current_replicas: u32,
    /// Demand and throughput; `None` when the metrics could not be read or are stale (then
    /// the policy holds and never scales down).
    pub demand: Option<Demand>,
    /// p95 time to first token over the stable window, seconds; `None`: no data.
    pub ttft_p95_s: Option<f64>,
    /// p95 time per output token over the stable window, seconds; `None`: no data.
    pub tpot_p95_s: Option<f64>,
    /// Per-replica loads (may be empty when only model totals are known).
    pub replica_loads: Vec<ReplicaLoad>,
    /// The replicas' concurrency caps (engine or gateway), when they report one: capacity is
    /// read where they run at it (`knee`).
    pub concurrency_cap: Option<super::knee::ConcurrencyCap>,
}
