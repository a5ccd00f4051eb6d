//! Metric names, defined once. Engine metrics use the model-server names that existing
//! gateways and dashboards already read (vLLM's), so tokenscale's gateway can drive vLLM or
//! SGLang pods and other gateways can drive tokenscale's engine. Names are given without the
//! `_total` suffix counters get on the wire; `*_TOTAL` constants carry the exposed name.

/// Label naming the served model on every per-model metric.
pub const LABEL_MODEL_NAME: &str = "model_name";

/// Engine (replica) metrics.
pub mod engine {
    /// Gauge: requests currently in the running batch.
    pub const NUM_REQUESTS_RUNNING: &str = "vllm:num_requests_running";
    /// Gauge: requests waiting to be scheduled.
    pub const NUM_REQUESTS_WAITING: &str = "vllm:num_requests_waiting";
    /// Gauge: fraction (0–1) of KV-cache blocks in use.
    pub const KV_CACHE_USAGE_PERC: &str = "vllm:kv_cache_usage_perc";
    /// Info gauge with labels `block_size`, `num_gpu_blocks`.
    pub const CACHE_CONFIG_INFO: &str = "vllm:cache_config_info";
    /// Counter: prompt tokens processed.
    pub const PROMPT_TOKENS_TOTAL: &str = "vllm:prompt_tokens_total";
    /// Counter: tokens generated.
    pub const GENERATION_TOKENS_TOTAL: &str = "vllm:generation_tokens_total";
    /// Counter: preemptions (a running request evicted to free KV blocks).
    pub const NUM_PREEMPTIONS_TOTAL: &str = "vllm:num_preemptions_total";
    /// Counter: prompt tokens looked up in the prefix cache.
    pub const PREFIX_CACHE_QUERIES_TOTAL: &str = "vllm:prefix_cache_queries_total";
    /// Counter: prompt tokens found in the prefix cache.
    pub const PREFIX_CACHE_HITS_TOTAL: &str = "vllm:prefix_cache_hits_total";
    /// Histogram (seconds): arrival to first token.
    pub const TIME_TO_FIRST_TOKEN_SECONDS: &str = "vllm:time_to_first_token_seconds";
    /// Histogram (seconds): between consecutive output tokens.
    pub const INTER_TOKEN_LATENCY_SECONDS: &str = "vllm:inter_token_latency_seconds";
    /// Histogram (seconds): arrival to last token.
    pub const E2E_REQUEST_LATENCY_SECONDS: &str = "vllm:e2e_request_latency_seconds";
    /// Histogram (seconds): arrival to first scheduling.
    pub const REQUEST_QUEUE_TIME_SECONDS: &str = "vllm:request_queue_time_seconds";
    /// Histogram (seconds): one engine step (forward pass plus bookkeeping).
    pub const STEP_DURATION_SECONDS: &str = "tokenscale_engine_step_duration_seconds";
    /// Histogram: sequences in one engine step.
    pub const BATCH_SIZE: &str = "tokenscale_engine_batch_size";
    /// Info gauge with labels `backend`, `simulated` (`true` for the `sim` backend).
    pub const BACKEND_INFO: &str = "tokenscale_engine_backend_info";
}
