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
    /// Counter: speculative verify steps (one per sequence whose draft was verified).
    pub const SPEC_DECODE_NUM_DRAFTS_TOTAL: &str = "vllm:spec_decode_num_drafts_total";
    /// Counter: draft tokens verified.
    pub const SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL: &str = "vllm:spec_decode_num_draft_tokens_total";
    /// Counter: draft tokens accepted.
    pub const SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL: &str =
        "vllm:spec_decode_num_accepted_tokens_total";
    /// Counter with label `position` (0-based place in the draft): draft tokens accepted there.
    pub const SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL: &str =
        "vllm:spec_decode_num_accepted_tokens_per_pos_total";
    /// Histogram (seconds): one engine step (forward pass plus bookkeeping).
    pub const STEP_DURATION_SECONDS: &str = "tokenscale_engine_step_duration_seconds";
    /// Histogram: sequences in one engine step.
    pub const BATCH_SIZE: &str = "tokenscale_engine_batch_size";
    /// Info gauge (value: Unix time of the last change) with vLLM's labels `max_lora`,
    /// `running_lora_adapters` and `waiting_lora_adapters` (comma-separated adapter names).
    pub const LORA_REQUESTS_INFO: &str = "vllm:lora_requests_info";
    /// Gauge: running sequences allowed now (`--max-num-seqs`, or the lower number a TPOT
    /// target's measured step time allows: the replica's operating point).
    pub const MAX_NUM_SEQS: &str = "tokenscale_engine_max_num_seqs";
    /// Info gauge with labels `backend`, `simulated` (`true` for the `sim` backend).
    pub const BACKEND_INFO: &str = "tokenscale_engine_backend_info";
    /// Info gauge with labels `source` (what `--model` named), `format` (`gguf`,
    /// `safetensors`) and `revision` (the Hub commit of an `hf://` source, else empty).
    pub const MODEL_INFO: &str = "tokenscale_engine_model_info";
    /// Gauge (seconds) with label [`LABEL_PHASE`]: how long each phase of this process's
    /// start took, in the order of [`START_PHASES`]. Exported once the engine serves.
    pub const START_PHASE_SECONDS: &str = "tokenscale_engine_start_phase_seconds";
    /// Label: a start phase of [`START_PHASE_SECONDS`].
    pub const LABEL_PHASE: &str = "phase";
    /// Start phase: process start to the weights on disk (from the Hub or the cache).
    pub const START_PHASE_FETCH: &str = "fetch";
    /// Start phase: weights parsed, quantised or uploaded to the device, the backend built.
    pub const START_PHASE_LOAD: &str = "load";
    /// Start phase: the first forward pass (threads, kernels, CUDA graphs).
    pub const START_PHASE_WARMUP: &str = "warmup";
    /// Start phase: warmed up to serving (the engine loop started, `/health` 200).
    pub const START_PHASE_READY: &str = "ready";
    /// The start phases, in order.
    pub const START_PHASES: [&str; 4] = [
        START_PHASE_FETCH,
        START_PHASE_LOAD,
        START_PHASE_WARMUP,
        START_PHASE_READY,
    ];
}

/// Gateway metrics: latency as clients see it (queueing included), demand and per-replica
/// load. The operator's autoscaler reads these: demand is `rate(GENERATION_TOKENS_TOTAL)` plus
/// `QUEUED_TOKENS`, p95 TTFT/TPOT come from the histograms' bucket deltas (bucket bounds below),
/// per-replica load from `REPLICA_IN_FLIGHT_*`. Every per-model metric carries the
/// [`LABEL_MODEL_NAME`](super::LABEL_MODEL_NAME) label.
pub mod gateway {
    /// Label: replica base URL (`http://10.0.0.7:8000`) on per-replica metrics.
    pub const LABEL_REPLICA: &str = "replica";
    /// Label: HTTP status code the client got (`200`, `429`, `503`, ...).
    pub const LABEL_STATUS: &str = "status";
    /// Label: tenant name on rate-limit metrics.
    pub const LABEL_TENANT: &str = "tenant";
    /// Label: which limit refused a request: `requests`, `input_tokens` or `output_tokens`.
    pub const LABEL_LIMIT: &str = "limit";
    /// Label: kind of upstream failure: `connect`, `status`, `stream`, `timeout`.
    pub const LABEL_KIND: &str = "kind";
    /// Label: replica state: `ready`, `draining`, `ejected`.
    pub const LABEL_STATE: &str = "state";
    /// Label: how a broken stream was continued: `exact` (token ids, tokenscale engines),
    /// `textual` (the text sent, other engines), `restart` (nothing was sent yet) or `none`.
    pub const LABEL_CONTINUATION: &str = "continuation";
    /// Label: what became of a broken stream: `resumed`, `ended` (it was complete), `failed`.
    pub const LABEL_RESULT: &str = "result";

    /// Counter (requests), labels `model_name`, `status`: finished requests by client status.
    pub const REQUESTS_TOTAL: &str = "tokenscale_gateway_requests_total";
    /// Histogram (seconds), label `model_name`: arrival at the gateway to the first byte of
    /// the stream sent to the client, streaming requests only (non-streaming ones have no
    /// observable first token); admission-queue wait included. Buckets: [`TTFT_BUCKETS_S`].
    pub const TIME_TO_FIRST_TOKEN_SECONDS: &str = "tokenscale_gateway_time_to_first_token_seconds";
    /// Histogram (seconds), label `model_name`: (end − first token) / (completion tokens − 1),
    /// one observation per streaming request with ≥ 2 completion tokens. Buckets:
    /// [`TPOT_BUCKETS_S`].
    pub const TIME_PER_OUTPUT_TOKEN_SECONDS: &str =
        "tokenscale_gateway_time_per_output_token_seconds";
    /// Histogram (seconds), label `model_name`: arrival to last byte sent to the client.
    /// Buckets: [`E2E_BUCKETS_S`].
    pub const E2E_REQUEST_LATENCY_SECONDS: &str = "tokenscale_gateway_e2e_request_latency_seconds";
    /// Histogram (seconds), label `model_name`: time spent in the admission queue (0 when a
    /// replica had room at once). Buckets: [`E2E_BUCKETS_S`].
    pub const QUEUE_TIME_SECONDS: &str = "tokenscale_gateway_queue_time_seconds";
    /// Counter (tokens), label `model_name`: prompt tokens, from the engines' `usage`.
    pub const PROMPT_TOKENS_TOTAL: &str = "tokenscale_gateway_prompt_tokens_total";
    /// Counter (tokens), label `model_name`: prompt tokens served from the prefix cache
    /// (`usage.prompt_tokens_details.cached_tokens`); a subset of `PROMPT_TOKENS_TOTAL`.
    pub const CACHED_PROMPT_TOKENS_TOTAL: &str = "tokenscale_gateway_cached_prompt_tokens_total";
    /// Counter (tokens), label `model_name`: completion tokens, from the engines' `usage`.
    /// `rate()` of this is the served output demand in tokens/s.
    pub const GENERATION_TOKENS_TOTAL: &str = "tokenscale_gateway_generation_tokens_total";
    /// Counter (answers), labels `model_name`, `source`: successful answers by where their
    /// token counts came from: `engine` (its `usage`) or `gateway` (a stream whose engine sent
    /// none: prompt estimated from its characters, completion counted a chunk a token).
    pub const USAGE_SOURCE_TOTAL: &str = "tokenscale_gateway_usage_source_total";
    /// Label of [`USAGE_SOURCE_TOTAL`].
    pub const LABEL_SOURCE: &str = "source";
    /// Counter (requests), labels `model_name`, `outcome`: requests that arrived for a model
    /// and passed the tenant's limits, counted on arrival by what admission did with them:
    /// `admitted` (a slot at once), `queued` (waited; some later expired) or `refused` (the
    /// queue was full). Requests refused for a tenant's limits or credentials are not counted.
    /// `rate()` of this is the offered load, not capped by the replicas that exist.
    pub const ARRIVALS_TOTAL: &str = "tokenscale_gateway_arrivals_total";
    /// Label of [`ARRIVALS_TOTAL`].
    pub const LABEL_OUTCOME: &str = "outcome";
    /// Counter (tokens), label `model_name`: estimated prompt tokens (characters /
    /// `chars_per_token`) of the requests counted by [`ARRIVALS_TOTAL`].
    pub const ARRIVAL_PROMPT_TOKENS_TOTAL: &str = "tokenscale_gateway_arrival_prompt_tokens_total";
    /// Counter (tokens), label `model_name`: output tokens the requests counted by
    /// [`ARRIVALS_TOTAL`] may generate (`max_tokens`, or the default, times `n`: what the
    /// output limit reserves).
    pub const ARRIVAL_OUTPUT_TOKENS_TOTAL: &str = "tokenscale_gateway_arrival_output_tokens_total";
    /// Gauge (requests), label `model_name`: requests waiting in the admission queue (all
    /// replicas at their concurrency target, or zero ready replicas: scale from zero).
    pub const QUEUE_DEPTH: &str = "tokenscale_gateway_queue_depth";
    /// Gauge (tokens), label `model_name`: estimated prompt tokens plus `max_tokens` of the
    /// requests waiting in the admission queue (queued demand).
    pub const QUEUED_TOKENS: &str = "tokenscale_gateway_queued_tokens";
    /// Gauge (requests), label `model_name`: requests admitted and not yet finished.
    pub const IN_FLIGHT_REQUESTS: &str = "tokenscale_gateway_in_flight_requests";
    /// Gauge (requests), labels `model_name`, `replica`: requests in flight on a replica.
    pub const REPLICA_IN_FLIGHT_REQUESTS: &str = "tokenscale_gateway_replica_in_flight_requests";
    /// Gauge (tokens), labels `model_name`, `replica`: estimated prompt + `max_tokens` of the
    /// requests in flight on a replica.
    pub const REPLICA_IN_FLIGHT_TOKENS: &str = "tokenscale_gateway_replica_in_flight_tokens";
    /// Gauge (requests), labels `model_name`, `replica`: the gateway's adaptive cap on
    /// requests in flight on a replica (engines that do not hold the SLO themselves); a replica
    /// without one has no series.
    pub const REPLICA_CONCURRENCY_LIMIT: &str = "tokenscale_gateway_replica_concurrency_limit";
    /// Gauge (requests), labels `model_name`, `replica`: the replica's last scraped
    /// `vllm:num_requests_waiting`.
    pub const REPLICA_REQUESTS_WAITING: &str = "tokenscale_gateway_replica_requests_waiting";
    /// Gauge (fraction 0–1), labels `model_name`, `replica`: the replica's last scraped
    /// `vllm:kv_cache_usage_perc`.
    pub const REPLICA_KV_CACHE_USAGE: &str = "tokenscale_gateway_replica_kv_cache_usage_perc";
    /// Gauge (replicas), labels `model_name`, `state`: replicas known to the gateway by state.
    pub const REPLICAS: &str = "tokenscale_gateway_replicas";
    /// Counter (requests), labels `tenant`, `model_name`, `limit`: requests refused with 429.
    /// `limit` is `requests`, `input_tokens`, `output_tokens` (the tenant's per-model limits),
    /// `total_requests`, `total_input_tokens`, `total_output_tokens` (its limits across models)
    /// or `in_flight`; refusals made before the body is read carry `model_name=""`.
    pub const RATE_LIMITED_TOTAL: &str = "tokenscale_gateway_rate_limited_total";
    /// Counter (requests), labels `tenant`, `model_name`: requests that passed the tenant's
    /// limits and finished, whatever their status.
    pub const TENANT_REQUESTS_TOTAL: &str = "tokenscale_gateway_tenant_requests_total";
    /// Counter (tokens), labels `tenant`, `model_name`: prompt tokens from the engines' usage.
    pub const TENANT_PROMPT_TOKENS_TOTAL: &str = "tokenscale_gateway_tenant_prompt_tokens_total";
    /// Counter (tokens), labels `tenant`, `model_name`: prompt tokens served from the prefix
    /// cache (not charged to the input limit).
    pub const TENANT_CACHED_PROMPT_TOKENS_TOTAL: &str =
        "tokenscale_gateway_tenant_cached_prompt_tokens_total";
    /// Counter (tokens), labels `tenant`, `model_name`: completion tokens from the engines' usage.
    pub const TENANT_GENERATION_TOKENS_TOTAL: &str =
        "tokenscale_gateway_tenant_generation_tokens_total";
    /// Counter (requests), labels `model_name`, `tenant`, `outcome`: lines of Batch API jobs
    /// answered, by `outcome`: `completed` (a 2xx answer, in the output file) or `failed`
    /// (in the error file). Batch lines are not in the interactive request metrics above
    /// (`REQUESTS_TOTAL`, the latency histograms, `ARRIVALS_TOTAL`): they are the `batch`
    /// class, reported apart.
    pub const BATCH_REQUESTS_TOTAL: &str = "tokenscale_gateway_batch_requests_total";
    /// Counter (tokens), labels `model_name`, `tenant`: prompt tokens of batch lines answered.
    pub const BATCH_PROMPT_TOKENS_TOTAL: &str = "tokenscale_gateway_batch_prompt_tokens_total";
    /// Counter (tokens), labels `model_name`, `tenant`: completion tokens of batch lines.
    pub const BATCH_GENERATION_TOKENS_TOTAL: &str =
        "tokenscale_gateway_batch_generation_tokens_total";
    /// Gauge (requests), label `model_name`: batch lines this pod has in flight now.
    pub const BATCH_IN_FLIGHT_REQUESTS: &str = "tokenscale_gateway_batch_in_flight_requests";
    /// Gauge (requests), label `model_name`: batch lines this pod lets run at once now, as
    /// paced by interactive latency (grows while interactive p95s hold their baseline, halves
    /// when they move; 0 while it measures the baseline again).
    pub const BATCH_PACE_LIMIT: &str = "tokenscale_gateway_batch_pace_limit";
    /// Gauge (tokens), label `model_name`: output tokens the unfinished lines of running
    /// batches may still generate (`max_tokens`, or the default, per line), over every batch
    /// of the model (shared state: every gateway pod reports the same figure).
    pub const BATCH_BACKLOG_OUTPUT_TOKENS: &str = "tokenscale_gateway_batch_backlog_output_tokens";
    /// Gauge (tokens/s), label `model_name`: output tokens per second the model must serve to
    /// finish every running batch by its deadline: the most, over the batches' deadlines `d`,
    /// of (backlog due by `d`) / (`d` − now − finalising margin). The autoscaler compares it
    /// with the capacity interactive traffic leaves.
    pub const BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND: &str =
        "tokenscale_gateway_batch_required_output_tokens_per_second";
    /// Gauge (batches), label `status`: unfinished Batch API jobs (`validating`,
    /// `in_progress`, `finalizing`, `cancelling`) by status (shared state).
    pub const BATCHES: &str = "tokenscale_gateway_batches";
    /// Gauge (connections): client connections open on the pod.
    pub const CONNECTIONS: &str = "tokenscale_gateway_connections";
    /// Counter (connections): client connections refused at `bounds.max_connections`.
    pub const CONNECTIONS_REFUSED_TOTAL: &str = "tokenscale_gateway_connections_refused_total";
    /// Gauge (requests): requests on the pod from headers read to response end.
    pub const POD_IN_FLIGHT_REQUESTS: &str = "tokenscale_gateway_pod_in_flight_requests";
    /// Gauge (pods): gateway pods sharing limits and capacity, as this pod last saw them.
    pub const GATEWAY_PODS: &str = "tokenscale_gateway_pods";
    /// Gauge (0/1): whether the last call to the limits store (Redis) succeeded.
    pub const LIMITS_STORE_UP: &str = "tokenscale_gateway_limits_store_up";
    /// Counter (calls): calls to the limits store that failed or timed out.
    pub const LIMITS_STORE_FAILURES_TOTAL: &str = "tokenscale_gateway_limits_store_failures_total";
    /// Counter (requests): requests limited by the pod alone while the store was down.
    pub const LIMITS_LOCAL_FALLBACK_TOTAL: &str = "tokenscale_gateway_limits_local_fallback_total";
    /// Counter (settlements): settlements the limits store could not take.
    pub const LIMITS_LOST_SETTLEMENTS_TOTAL: &str =
        "tokenscale_gateway_limits_lost_settlements_total";
    /// Counter (events), labels `model_name`, `replica`, `kind`: upstream failures.
    pub const UPSTREAM_ERRORS_TOTAL: &str = "tokenscale_gateway_upstream_errors_total";
    /// Counter (attempts), label `model_name`: requests re-sent to another replica before
    /// any byte reached the client.
    pub const RETRIES_TOTAL: &str = "tokenscale_gateway_retries_total";
    /// Counter (streams), labels `model_name`, `continuation`, `result`: streams whose replica
    /// broke mid-answer (reset, idle timeout, in-band error), each counted once per break.
    pub const STREAM_INTERRUPTIONS_TOTAL: &str = "tokenscale_gateway_stream_interruptions_total";
    /// Label: a route's name (what clients send as `model`).
    pub const LABEL_ROUTE: &str = "route";
    /// Label: why a route moved on: `rate_limited` (a tenant limit of that model),
    /// `no_capacity` (none within the request's share of its deadline), `upstream`.
    pub const LABEL_REASON: &str = "reason";
    /// Counter (requests), labels `route`, `model_name`: requests for a route, by the model
    /// that answered them.
    pub const ROUTE_REQUESTS_TOTAL: &str = "tokenscale_gateway_route_requests_total";
    /// Counter (events), labels `route`, `from`, `to`, `reason`: a route's request moving
    /// from one model to the next (`to="none"`: none was left, the client got the error).
    pub const ROUTE_FALLBACKS_TOTAL: &str = "tokenscale_gateway_route_fallbacks_total";

    /// Upper bounds (seconds) of the TTFT histogram buckets (`+Inf` implied). A p95 read from
    /// a histogram is interpolated inside one bucket: bounds at most ~1.33× apart (2× apart
    /// before) keep that read close to what clients measure — with 25–50 ms in one bucket, a
    /// true 25 ms p95 read as 32 ms, and the autoscaler acts on the read.
    pub const TTFT_BUCKETS_S: &[f64] = &[
        0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125, 0.15, 0.2,
        0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0,
        20.0, 30.0, 40.0, 80.0,
    ];
    /// Upper bounds (seconds) of the time-per-output-token histogram buckets.
    pub const TPOT_BUCKETS_S: &[f64] = &[
        0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
        0.75, 1.0, 2.5,
    ];
    /// Upper bounds (seconds) of the end-to-end and queue-time histogram buckets.
    pub const E2E_BUCKETS_S: &[f64] = &[
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0,
    ];
}

/// Operator metrics: per-model replica counts, GPUs and SLO targets, set on every reconcile
/// (the Grafana dashboard draws them next to the gateway's numbers). Every per-model gauge
/// carries [`LABEL_MODEL_NAME`](super::LABEL_MODEL_NAME) (the served model name, as on the
/// gateway's metrics) and [`LABEL_NAMESPACE`](self::LABEL_NAMESPACE).
pub mod operator {
    /// Label: namespace of the ModelDeployment (two namespaces may serve the same name).
    pub const LABEL_NAMESPACE: &str = "namespace";

    /// Counter: reconciles started.
    pub const RECONCILIATIONS_TOTAL: &str = "tokenscale_operator_reconciliations_total";
    /// Counter, label `reason`: reconciles that failed.
    pub const RECONCILE_FAILURES_TOTAL: &str = "tokenscale_operator_reconcile_failures_total";
    /// Histogram (seconds): one reconcile.
    pub const RECONCILE_DURATION_SECONDS: &str = "tokenscale_operator_reconcile_duration_seconds";
    /// Counter, labels `direction`, `reason`: replica changes made.
    pub const SCALE_DECISIONS_TOTAL: &str = "tokenscale_operator_scale_decisions_total";
    /// Gauge: 1 while this replica holds the leader lease.
    pub const LEADER: &str = "tokenscale_operator_leader";

    /// Gauge (replicas), labels `model_name`, `namespace`: replicas the autoscaler asks for.
    pub const DESIRED_REPLICAS: &str = "tokenscale_operator_desired_replicas";
    /// Gauge (replicas), labels `model_name`, `namespace`: engine replicas passing readiness.
    pub const READY_REPLICAS: &str = "tokenscale_operator_ready_replicas";
    /// Gauge (GPUs), labels `model_name`, `namespace`: `nvidia.com/gpu` held by ready
    /// replicas (0 for cpu and sim backends).
    pub const GPUS: &str = "tokenscale_operator_gpus";
    /// Gauge (seconds), labels `model_name`, `namespace`: the p95 time-to-first-token SLO.
    pub const SLO_TTFT_SECONDS: &str = "tokenscale_operator_slo_ttft_seconds";
    /// Gauge (seconds), labels `model_name`, `namespace`: the p95 time-per-output-token SLO.
    pub const SLO_TPOT_SECONDS: &str = "tokenscale_operator_slo_tpot_seconds";
}
