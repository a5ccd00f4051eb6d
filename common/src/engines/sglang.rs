//! SGLang's `/metrics` (`--enable-metrics`). Scheduler gauges carry `tp_rank`, `pp_rank` and
//! `moe_ep_rank` labels and, with `--enable-metrics-for-all-schedulers`, every rank repeats
//! the same value: rank 0 is kept so tensor parallelism does not multiply the load.
//! Priority scheduling adds per-class series beside an aggregate with `priority=""`: the
//! aggregate is kept. Data-parallel ranks (`dp_rank`) are summed.

use super::dialect::{Dialect, SampleRef};
use super::kind::EngineKind;
use super::reading::Signal;

/// SGLang's names, newest first.
pub static DIALECT: Dialect = Dialect {
    kind: EngineKind::Sglang,
    running: &["sglang:num_running_reqs"],
    waiting: &["sglang:num_queue_reqs"],
    kv_cache_usage: &["sglang:token_usage"],
    generated_tokens: &["sglang:generation_tokens_total"],
    prompt_tokens: &["sglang:prompt_tokens_total"],
    finished_requests: &[
        "sglang:e2e_request_latency_seconds_count",
        "sglang:num_requests_total",
    ],
    time_to_first_token: &["sglang:time_to_first_token_seconds"],
    // Renamed from `time_per_output_token_seconds` (which observed each gap) in 0.4.
    inter_token_latency: &[
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ],
    keep,
    note,
};

/// Labels whose non-zero values repeat rank 0's numbers.
const RANK_LABELS: [&str; 4] = ["tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"];

fn keep(sample: &SampleRef<'_>) -> bool {
    let rank_zero = RANK_LABELS
        .iter()
        .all(|label| sample.label(label).is_none_or(|rank| rank == "0"));
    rank_zero && sample.label("priority").is_none_or(str::is_empty)
}

fn note(signal: Signal) -> Option<&'static str> {
    match signal {
        Signal::RunningRequests | Signal::WaitingRequests | Signal::KvCacheUsage => {
            Some("SGLang exports nothing without --enable-metrics")
        }
        _ => None,
    }
}
