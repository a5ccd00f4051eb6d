//! Every engine's metric adapter on real `/metrics` texts (`common/fixtures/engines/`, each
//! citing where it was published or how it was captured): the reading each gives, and what a
//! renamed, missing or repeated series gives instead — a named absence, never a silent zero.

use std::path::PathBuf;

use tokenscale_common::engines::{self, EngineKind, EngineReading, SampleRef, Signal};
use tokenscale_operator::metrics_source::text_format::{Sample, parse};

fn fixture(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../common/fixtures/engines")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn samples(text: &str) -> Vec<Sample> {
    let exposition = parse(text);
    assert!(
        exposition.errors.is_empty(),
        "a published exposition parses cleanly: {:?}",
        exposition.errors
    );
    exposition.samples
}

fn refs(samples: &[Sample]) -> impl Iterator<Item = SampleRef<'_>> {
    samples.iter().map(|s| SampleRef {
        name: &s.name,
        labels: &s.labels,
        value: s.value,
    })
}

/// Reads `text` with the adapter of the kind detected from it, checking it is `kind`.
fn read_as(kind: EngineKind, text: &str) -> EngineReading {
    let samples = samples(text);
    assert_eq!(EngineKind::detect(refs(&samples)), Some(kind));
    engines::read(kind, refs(&samples))
}

fn last_bucket(buckets: &Result<Vec<(f64, f64)>, engines::Absent>) -> Option<(f64, f64)> {
    buckets.as_ref().ok().and_then(|b| b.last().copied())
}

fn absent_signals(reading: &EngineReading) -> Vec<Signal> {
    reading.absent().iter().map(|a| a.signal).collect()
}

#[test]
fn tokenscale_engine_capture() {
    let r = read_as(
        EngineKind::Tokenscale,
        &fixture("tokenscale/engine-smollm2-cpu.prom"),
    );
    assert_eq!(
        (
            r.running_requests.clone(),
            r.waiting_requests.clone(),
            r.kv_cache_usage.clone()
        ),
        (Ok(0.0), Ok(0.0), Ok(0.0))
    );
    assert_eq!(
        (r.generated_tokens.clone(), r.prompt_tokens.clone()),
        (Ok(12.0), Ok(65.0))
    );
    assert_eq!(r.finished_requests, Ok(2.0));
    assert_eq!(
        last_bucket(&r.time_to_first_token),
        Some((f64::INFINITY, 2.0))
    );
    assert_eq!(
        last_bucket(&r.inter_token_latency),
        Some((f64::INFINITY, 10.0))
    );
    assert!(r.absent().is_empty());
}

#[test]
fn vllm_older_names_through_the_aibrix_runtime() {
    let r = read_as(
        EngineKind::Vllm,
        &fixture("vllm/aibrix-runtime-qwen-coder.prom"),
    );
    assert_eq!(r.running_requests, Ok(0.0));
    assert_eq!(r.waiting_requests, Ok(0.0));
    assert_eq!(
        r.kv_cache_usage,
        Ok(0.0),
        "read from vllm:gpu_cache_usage_perc"
    );
    assert_eq!(r.generated_tokens, Ok(955.0));
    assert_eq!(r.prompt_tokens, Ok(148.0));
    assert_eq!(
        r.finished_requests,
        Ok(4.0),
        "from vllm:request_success_total"
    );
    assert_eq!(
        absent_signals(&r),
        [Signal::TimeToFirstToken, Signal::InterTokenLatency]
    );
    let ttft = r.time_to_first_token.expect_err("no histogram published");
    assert!(
        ttft.to_string()
            .contains("no vllm:time_to_first_token_seconds in vLLM's /metrics"),
        "{ttft}"
    );
}

#[test]
fn vllm_renamed_or_missing_kv_gauge() {
    let text = fixture("vllm/aibrix-runtime-qwen-coder.prom");
    let renamed = text.replace("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc");
    assert_eq!(read_as(EngineKind::Vllm, &renamed).kv_cache_usage, Ok(0.0));
    let missing: String = text
        .lines()
        .filter(|l| !l.contains("gpu_cache_usage_perc"))
        .map(|l| format!("{l}\n"))
        .collect();
    let absent = read_as(EngineKind::Vllm, &missing)
        .kv_cache_usage
        .expect_err("no KV gauge left");
    assert_eq!(
        absent.to_string(),
        "KV-cache use: no vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc in vLLM's /metrics"
    );
}

#[test]
fn vllm_lora_adapters_add_up_on_one_replica() {
    // The same engine serving a LoRA adapter too: every series again under its own name.
    let text = fixture("vllm/aibrix-runtime-qwen-coder.prom");
    let adapter = text.replace("Qwen/Qwen2.5-Coder-1.5B-Instruct", "lora-1");
    let both = format!("{text}{adapter}");
    let r = read_as(EngineKind::Vllm, &both);
    assert_eq!(r.generated_tokens, Ok(1910.0));
    assert_eq!(r.finished_requests, Ok(8.0));
}

#[test]
fn vllm_data_parallel_engines_and_the_new_inter_token_name() {
    let r = read_as(
        EngineKind::Vllm,
        &fixture("vllm/pr22227-data-parallel-excerpt.prom"),
    );
    // The newer name wins: the deprecated per-token histogram (243 gaps on engine 1) is not
    // added on top.
    assert_eq!(
        r.inter_token_latency,
        Ok(vec![(0.01, 229.0), (0.025, 954.0)])
    );
    assert!(r.running_requests.is_err(), "not in the quoted lines");
}

#[test]
fn vllm_0_10_kv_gauge_under_its_new_name() {
    let r = read_as(
        EngineKind::Vllm,
        &fixture("vllm/production-stack-617-v0.10-excerpt.prom"),
    );
    assert_eq!(r.kv_cache_usage, Ok(9.75010481363281e-06));
    // `_created` gauges and deprecated prefix-cache counters are not read as anything.
    assert!(r.generated_tokens.is_err() && r.prompt_tokens.is_err());
}

#[test]
fn vllm_0_6_histograms_under_the_older_inter_token_name() {
    let r = read_as(
        EngineKind::Vllm,
        &fixture("vllm/issue8819-v0.6-excerpt.prom"),
    );
    assert_eq!(r.time_to_first_token, Ok(vec![(f64::INFINITY, 1.0)]));
    let itl = r
        .inter_token_latency
        .expect("time_per_output_token_seconds is read");
    assert_eq!(itl.len(), 10);
    assert_eq!(itl.first(), Some(&(0.01, 99.0)));
}

#[test]
fn sglang_documented_example() {
    let r = read_as(
        EngineKind::Sglang,
        &fixture("sglang/docs-production-metrics.prom"),
    );
    assert_eq!(r.running_requests, Ok(162.0));
    assert_eq!(r.waiting_requests, Ok(2826.0));
    assert_eq!(r.kv_cache_usage, Ok(0.28));
    assert_eq!(r.generated_tokens, Ok(7.557572e6));
    assert_eq!(r.prompt_tokens, Ok(8.128902e6));
    assert_eq!(
        r.finished_requests,
        Ok(11228.0),
        "the e2e histogram's count"
    );
    assert!(r.absent().is_empty());
    let ttft = r.time_to_first_token.expect("TTFT histogram");
    assert_eq!(
        (ttft.len(), ttft.last()),
        (21, Some(&(f64::INFINITY, 11008.0)))
    );
    let itl = r
        .inter_token_latency
        .expect("time_per_output_token_seconds is read");
    assert_eq!(
        (itl.len(), itl.last()),
        (19, Some(&(f64::INFINITY, 7.400757e6)))
    );
}

#[test]
fn sglang_renamed_histogram_and_repeated_tensor_parallel_ranks() {
    let text = fixture("sglang/docs-production-metrics.prom");
    let base = read_as(EngineKind::Sglang, &text);
    let renamed = text.replace(
        "time_per_output_token_seconds",
        "inter_token_latency_seconds",
    );
    assert_eq!(
        read_as(EngineKind::Sglang, &renamed).inter_token_latency,
        base.inter_token_latency
    );
    // Every scheduler of a TP=2 engine reporting (--enable-metrics-for-all-schedulers):
    // each series twice, tp_rank 0 and 1. The load is the same, not doubled.
    let rank = |r: &str| text.replace('{', &format!("{{tp_rank=\"{r}\","));
    let both = format!("{}{}", rank("0"), rank("1"));
    let ranked = read_as(EngineKind::Sglang, &both);
    assert_eq!(ranked, base);
}

#[test]
fn llama_server_capture_has_no_kv_gauge_and_no_histograms() {
    let r = read_as(
        EngineKind::Llamacpp,
        &fixture("llamacpp/llama-server-busy.prom"),
    );
    assert_eq!(r.running_requests, Ok(2.0));
    assert_eq!(r.waiting_requests, Ok(1.0));
    assert_eq!(r.generated_tokens, Ok(28.0));
    assert_eq!(r.prompt_tokens, Ok(56.0), "excluding cached prompt tokens");
    assert_eq!(
        absent_signals(&r),
        [
            Signal::KvCacheUsage,
            Signal::FinishedRequests,
            Signal::TimeToFirstToken,
            Signal::InterTokenLatency
        ]
    );
    let messages: Vec<String> = r.absent().iter().map(ToString::to_string).collect();
    assert!(
        messages[0].contains("ggml-org/llama.cpp#13660"),
        "{messages:?}"
    );
    assert!(
        messages[2].contains("the gateway's own carry latency"),
        "{messages:?}"
    );
}

#[test]
fn llama_server_before_the_kv_gauge_was_removed() {
    let r = read_as(
        EngineKind::Llamacpp,
        &fixture("llamacpp/ik-llama-pr695.prom"),
    );
    assert_eq!(r.kv_cache_usage, Ok(0.491063));
    assert_eq!(r.generated_tokens, Ok(3469.0));
    assert_eq!((r.running_requests, r.waiting_requests), (Ok(0.0), Ok(0.0)));
}

#[test]
fn llama_server_without_its_request_gauges() {
    let text =
        fixture("llamacpp/llama-server-busy.prom").replace("requests_processing", "slots_busy");
    let absent = read_as(EngineKind::Llamacpp, &text)
        .running_requests
        .expect_err("renamed away");
    assert_eq!(
        absent.to_string(),
        "running requests: no llamacpp:requests_processing in llama.cpp's /metrics \
         (llama-server exports nothing without --metrics)"
    );
}

#[test]
fn a_text_read_with_the_wrong_adapter_reads_as_nothing() {
    let sglang = samples(&fixture("sglang/docs-production-metrics.prom"));
    for kind in [
        EngineKind::Vllm,
        EngineKind::Llamacpp,
        EngineKind::Tokenscale,
    ] {
        assert!(engines::read(kind, refs(&sglang)).is_empty(), "{kind}");
    }
}
