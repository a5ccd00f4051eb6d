//! Tests of the per-model reduction to the policy's view.

use super::*;
use crate::metrics_source::window::bucket_key;

fn engine_reading(tokens: f64, requests: f64, fast: f64, slow: f64, running: f64) -> Reading {
    let counters = [
        (keys::ENGINE_TOKENS.to_string(), tokens),
        (keys::ENGINE_REQUESTS.to_string(), requests),
        (bucket_key(keys::ENGINE_TTFT, 0.2), fast),
        (bucket_key(keys::ENGINE_TTFT, 2.0), fast + slow),
        (bucket_key(keys::ENGINE_TTFT, f64::INFINITY), fast + slow),
    ]
    .into_iter()
    .collect();
    Reading {
        counters,
        gauges: Gauges {
            waiting: 1.0,
            running,
            kv_cache_usage: 0.5,
        },
        revision: None,
        absent: Vec::new(),
    }
}

fn round(readings: Vec<(&str, Reading)>) -> ScrapeRound {
    ScrapeRound {
        readings: readings
            .into_iter()
            .map(|(n, r)| (n.to_string(), TargetKind::Engine, r))
            .collect(),
        failed: 0,
    }
}

#[test]
fn engines_only_view_sums_replicas_and_computes_rates() {
    let mut m = ModelMetrics::default();
    // Two pods, each 50 tokens/s and 1 request/s (50 tokens per request), all fast.
    for step in 0..=6 {
        let t = f64::from(step) * 10.0;
        let r = |offset: f64| engine_reading(offset + t * 50.0, t, t, 0.0, 4.0);
        m.record(
            t,
            &round(vec![("pod-a", r(1_000.0)), ("pod-b", r(0.0))]),
            120.0,
        );
    }
    let view = m.view(60.0, 60.0, 10.0, 30.0);
    let demand = view.demand.expect("fresh metrics");
    assert!((demand.output_tokens_per_s.stable - 100.0).abs() < 1e-9);
    assert!((demand.output_tokens_per_s.panic - 100.0).abs() < 1e-9);
    assert!((demand.arrival_requests_per_s.stable - 2.0).abs() < 1e-9);
    assert_eq!(demand.mean_output_tokens_per_request, Some(50.0));
    assert_eq!((demand.queued_requests, demand.running_requests), (2, 8));
    assert!(view.ttft_p95_s.is_some_and(|p| p <= 0.2));
    assert_eq!(view.replica_loads.len(), 2);
    assert!((view.replica_loads[0].output_tokens_per_s - 50.0).abs() < 1e-9);
}

#[test]
fn slow_requests_in_the_window_raise_p95() {
    let mut m = ModelMetrics::default();
    m.record(
        0.0,
        &round(vec![("p", engine_reading(0.0, 0.0, 0.0, 0.0, 1.0))]),
        120.0,
    );
    m.record(
        30.0,
        &round(vec![("p", engine_reading(100.0, 10.0, 5.0, 0.0, 1.0))]),
        120.0,
    );
    m.record(
        60.0,
        &round(vec![("p", engine_reading(200.0, 20.0, 5.0, 5.0, 1.0))]),
        120.0,
    );
    let p95 = m.view(60.0, 30.0, 10.0, 30.0).ttft_p95_s.unwrap_or(0.0);
    assert!(p95 > 0.2, "{p95}");
}

#[test]
fn stale_or_short_history_means_no_demand() {
    let mut m = ModelMetrics::default();
    assert_eq!(m.view(0.0, 60.0, 6.0, 30.0).demand, None);
    m.record(
        0.0,
        &round(vec![("p", engine_reading(0.0, 0.0, 0.0, 0.0, 0.0))]),
        120.0,
    );
    assert_eq!(
        m.view(0.0, 60.0, 6.0, 30.0).demand,
        None,
        "one snapshot is no rate"
    );
    m.record(
        10.0,
        &round(vec![("p", engine_reading(10.0, 1.0, 1.0, 0.0, 0.0))]),
        120.0,
    );
    assert!(m.view(10.0, 60.0, 6.0, 30.0).demand.is_some());
    // Nothing answers for a minute: stale.
    m.record(
        70.0,
        &ScrapeRound {
            readings: vec![],
            failed: 1,
        },
        120.0,
    );
    assert_eq!(m.view(70.0, 60.0, 6.0, 30.0).demand, None);
}

/// A llama.cpp replica lacks KV-cache use and latency histograms: the view names what the
/// policy went without (latency only while no gateway measures it), never a silent zero.
#[test]
fn signals_an_engine_lacks_are_named_in_the_view() {
    use crate::metrics_source::readings::read;
    use crate::metrics_source::text_format::parse;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../common/fixtures/engines/");
    let text =
        std::fs::read_to_string(format!("{root}llamacpp/llama-server-busy.prom")).expect("fixture");
    let llama = read(TargetKind::Engine, &parse(&text).samples, "m");
    let mut m = ModelMetrics::default();
    m.record(0.0, &round(vec![("pod-a", llama.clone())]), 120.0);
    let missing = m.view(0.0, 60.0, 10.0, 30.0).missing;
    let has = |what: &str| missing.iter().any(|line| line.starts_with(what));
    assert!(has("KV-cache use"), "{missing:?}");
    assert!(has("time-to-first-token histogram"), "{missing:?}");
    assert!(!has("prompt tokens"), "never read: {missing:?}");

    let mut with_gateway = round(vec![("pod-a", llama)]);
    with_gateway
        .readings
        .push(("gateway".into(), TargetKind::Gateway, Reading::default()));
    let mut m = ModelMetrics::default();
    m.record(0.0, &with_gateway, 120.0);
    let missing = m.view(0.0, 60.0, 10.0, 30.0).missing;
    assert!(missing.iter().any(|l| l.starts_with("KV-cache use")));
    assert!(
        !missing.iter().any(|l| l.contains("histogram")),
        "the gateway's histograms stand in: {missing:?}"
    );
}
