//! tokenscale's own engine: it exports vLLM's current names (defined once in
//! `metrics::engine`) so other gateways can drive it, plus its own `tokenscale_engine_*`.

use super::dialect::{Dialect, keep_all, no_note};
use super::kind::EngineKind;
use crate::metrics::engine;

/// tokenscale's engine names.
pub static DIALECT: Dialect = Dialect {
    kind: EngineKind::Tokenscale,
    running: &[engine::NUM_REQUESTS_RUNNING],
    waiting: &[engine::NUM_REQUESTS_WAITING],
    kv_cache_usage: &[engine::KV_CACHE_USAGE_PERC],
    generated_tokens: &[engine::GENERATION_TOKENS_TOTAL],
    prompt_tokens: &[engine::PROMPT_TOKENS_TOTAL],
    finished_requests: &[E2E_COUNT],
    time_to_first_token: &[engine::TIME_TO_FIRST_TOKEN_SECONDS],
    inter_token_latency: &[engine::INTER_TOKEN_LATENCY_SECONDS],
    keep: keep_all,
    note: no_note,
};

/// Requests finished: the end-to-end latency histogram's count.
const E2E_COUNT: &str = "vllm:e2e_request_latency_seconds_count";
