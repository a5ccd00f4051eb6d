//! vLLM's `/metrics`: the current names (v1 engine, 0.10 and later) and the older ones still
//! deployed, first match wins so an engine exporting both (0.10.x) counts once. Data-parallel
//! engines label each engine core (`engine="0"`); LoRA adapters add `model_name`s: a replica
//! is all of them, summed.

use super::dialect::{Dialect, keep_all};
use super::kind::EngineKind;
use super::reading::Signal;

/// vLLM's names, newest first.
pub static DIALECT: Dialect = Dialect {
    kind: EngineKind::Vllm,
    running: &["vllm:num_requests_running"],
    waiting: &["vllm:num_requests_waiting"],
    // `gpu_cache_usage_perc` was renamed in 0.10 (deprecated, then hidden in 0.11).
    kv_cache_usage: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    generated_tokens: &["vllm:generation_tokens_total"],
    prompt_tokens: &["vllm:prompt_tokens_total"],
    finished_requests: &[
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_success_total",
    ],
    time_to_first_token: &["vllm:time_to_first_token_seconds"],
    // `time_per_output_token_seconds` observed each inter-token gap until 0.10 renamed it;
    // 0.11's `request_time_per_output_token_seconds` is a per-request mean, not the same.
    inter_token_latency: &[
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    ],
    keep: keep_all,
    note,
};

fn note(signal: Signal) -> Option<&'static str> {
    match signal {
        Signal::TimeToFirstToken | Signal::InterTokenLatency | Signal::FinishedRequests => {
            Some("vLLM exports histograms only after its first finished request")
        }
        _ => None,
    }
}
