//! The adapter core on hand-made samples: first name wins, ranks and priorities filtered,
//! sums and maxima, bad values skipped, absent signals named. The engines' real `/metrics`
//! texts are read in `operator/tests/engine_adapters.rs`.

use super::*;

type Owned = (String, Vec<(String, String)>, f64);

fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Owned {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (name.to_string(), labels, value)
}

fn refs(samples: &[Owned]) -> impl Iterator<Item = SampleRef<'_>> {
    samples.iter().map(|(name, labels, value)| SampleRef {
        name,
        labels,
        value: *value,
    })
}

#[test]
fn the_newer_name_wins_and_the_older_one_is_not_added() {
    let samples = [
        sample("vllm:kv_cache_usage_perc", &[("engine", "0")], 0.25),
        sample("vllm:gpu_cache_usage_perc", &[("engine", "0")], 0.25),
        sample(
            "vllm:time_per_output_token_seconds_bucket",
            &[("le", "0.1")],
            5.0,
        ),
    ];
    let reading = read(EngineKind::Vllm, refs(&samples));
    assert_eq!(reading.kv_cache_usage, Ok(0.25));
    // Only the old inter-token name is there: it is read.
    assert_eq!(reading.inter_token_latency, Ok(vec![(0.1, 5.0)]));
}

#[test]
fn data_parallel_engines_sum_and_kv_use_is_the_fullest() {
    let samples = [
        sample("vllm:num_requests_running", &[("engine", "0")], 3.0),
        sample("vllm:num_requests_running", &[("engine", "1")], 4.0),
        sample("vllm:kv_cache_usage_perc", &[("engine", "0")], 0.2),
        sample("vllm:kv_cache_usage_perc", &[("engine", "1")], 0.7),
        sample(
            "vllm:inter_token_latency_seconds_bucket",
            &[("engine", "0"), ("le", "+Inf")],
            2.0,
        ),
        sample(
            "vllm:inter_token_latency_seconds_bucket",
            &[("engine", "1"), ("le", "+Inf")],
            3.0,
        ),
        sample(
            "vllm:inter_token_latency_seconds_bucket",
            &[("engine", "1"), ("le", "0.5")],
            1.0,
        ),
    ];
    let reading = read(EngineKind::Vllm, refs(&samples));
    assert_eq!(reading.running_requests, Ok(7.0));
    assert_eq!(reading.kv_cache_usage, Ok(0.7));
    assert_eq!(
        reading.inter_token_latency,
        Ok(vec![(0.5, 1.0), (f64::INFINITY, 5.0)])
    );
}

#[test]
fn sglang_keeps_rank_zero_and_the_priority_aggregate() {
    let rank = |tp: &str, priority: Option<&str>, value| {
        let mut labels = vec![("model_name", "m"), ("tp_rank", tp)];
        if let Some(p) = priority {
            labels.push(("priority", p));
        }
        sample("sglang:num_running_reqs", &labels, value)
    };
    let samples = [
        rank("0", Some(""), 4.0),
        rank("1", Some(""), 4.0),
        rank("0", Some("9"), 1.0),
        sample("sglang:num_queue_reqs", &[("dp_rank", "0")], 2.0),
        sample("sglang:num_queue_reqs", &[("dp_rank", "1")], 5.0),
    ];
    let reading = read(EngineKind::Sglang, refs(&samples));
    assert_eq!(reading.running_requests, Ok(4.0), "rank 1 repeats rank 0");
    assert_eq!(
        reading.waiting_requests,
        Ok(7.0),
        "data-parallel ranks add up"
    );
}

#[test]
fn values_that_are_not_numbers_are_skipped_never_summed() {
    let samples = [
        sample("llamacpp:requests_processing", &[], f64::NAN),
        sample("vllm:num_requests_waiting", &[], f64::NAN),
        sample("vllm:num_requests_waiting", &[], 2.0),
        sample(
            "vllm:e2e_request_latency_seconds_bucket",
            &[("le", "nope")],
            9.0,
        ),
    ];
    assert!(
        read(EngineKind::Llamacpp, refs(&samples))
            .running_requests
            .is_err()
    );
    let vllm = read(EngineKind::Vllm, refs(&samples));
    assert_eq!(vllm.waiting_requests, Ok(2.0));
    assert!(vllm.time_to_first_token.is_err());
}

#[test]
fn an_absent_signal_says_what_was_looked_for_and_why() {
    let reading = read(EngineKind::Llamacpp, refs(&[]));
    assert!(reading.is_empty());
    let kv = reading.kv_cache_usage.expect_err("absent");
    assert_eq!(
        kv.to_string(),
        "KV-cache use: no llamacpp:kv_cache_usage_ratio in llama.cpp's /metrics \
         (removed from llama-server in 2025, ggml-org/llama.cpp#13660)"
    );
    let ttft = reading.time_to_first_token.expect_err("absent");
    assert!(
        ttft.to_string()
            .starts_with("time-to-first-token histogram: llama.cpp exports none")
    );
}

#[test]
fn kinds_are_detected_from_the_names_and_round_trip_as_text() {
    let vllm = [sample("vllm:num_requests_running", &[], 1.0)];
    assert_eq!(EngineKind::detect(refs(&vllm)), Some(EngineKind::Vllm));
    let ours = [
        sample("vllm:num_requests_running", &[], 1.0),
        sample("tokenscale_engine_backend_info", &[("backend", "cpu")], 1.0),
    ];
    assert_eq!(
        EngineKind::detect(refs(&ours)),
        Some(EngineKind::Tokenscale)
    );
    let sglang = [sample("sglang:token_usage", &[], 0.1)];
    assert_eq!(EngineKind::detect(refs(&sglang)), Some(EngineKind::Sglang));
    let llama = [sample("llamacpp:requests_deferred", &[], 0.0)];
    assert_eq!(EngineKind::detect(refs(&llama)), Some(EngineKind::Llamacpp));
    assert_eq!(EngineKind::detect(refs(&[sample("up", &[], 1.0)])), None);
    for kind in EngineKind::ALL {
        assert_eq!(kind.as_str().parse::<EngineKind>(), Ok(kind));
    }
    assert!("tgi".parse::<EngineKind>().is_err());
}

#[test]
fn tokenscale_reads_the_names_its_engine_writes() {
    assert_eq!(
        tokenscale::DIALECT.finished_requests,
        [format!(
            "{}_count",
            crate::metrics::engine::E2E_REQUEST_LATENCY_SECONDS
        )]
    );
}
