//! llama.cpp's `llama-server` `/metrics` (`--metrics`): counters and gauges, no model label
//! and no latency histograms, so the gateway's own histograms carry this engine's TTFT and
//! inter-token latency. Its KV-cache gauges were removed in 2025 (ggml-org/llama.cpp#13660).

use super::dialect::{Dialect, keep_all};
use super::kind::EngineKind;
use super::reading::Signal;

/// llama.cpp's names.
pub static DIALECT: Dialect = Dialect {
    kind: EngineKind::Llamacpp,
    // Slots busy with a request.
    running: &["llamacpp:requests_processing"],
    // Requests waiting for a free slot.
    waiting: &["llamacpp:requests_deferred"],
    kv_cache_usage: &["llamacpp:kv_cache_usage_ratio"],
    generated_tokens: &["llamacpp:tokens_predicted_total"],
    prompt_tokens: &["llamacpp:prompt_tokens_total"],
    finished_requests: &[],
    time_to_first_token: &[],
    inter_token_latency: &[],
    keep: keep_all,
    note,
};

fn note(signal: Signal) -> Option<&'static str> {
    match signal {
        Signal::KvCacheUsage => Some("removed from llama-server in 2025, ggml-org/llama.cpp#13660"),
        Signal::FinishedRequests => Some("llama-server counts tokens, not requests"),
        Signal::TimeToFirstToken | Signal::InterTokenLatency => {
            Some("llama-server has no latency histograms; the gateway's own carry latency")
        }
        Signal::RunningRequests | Signal::WaitingRequests => {
            Some("llama-server exports nothing without --metrics")
        }
        Signal::GeneratedTokens | Signal::PromptTokens => None,
    }
}
