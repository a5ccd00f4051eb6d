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
        batch: BatchGauges::default(),
        start: None,
        cap: None,
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

fn gateway_reading(finished: f64, arrived: Option<f64>, queued: f64) -> Reading {
    let mut counters: std::collections::BTreeMap<_, _> = [
        (keys::GW_TOKENS.to_string(), finished * 100.0),
        (keys::GW_REQUESTS.to_string(), finished),
    ]
    .into_iter()
    .collect();
    if let Some(arrived) = arrived {
        counters.insert(keys::GW_ARRIVALS.to_string(), arrived);
    }
    Reading {
        counters,
        gauges: Gauges {
            waiting: queued,
            ..Gauges::default()
        },
        ..Reading::default()
    }
}

fn gateway_round(reading: Reading) -> ScrapeRound {
    ScrapeRound {
        readings: vec![("gateway".into(), TargetKind::Gateway, reading)],
        failed: 0,
    }
}

/// A saturated fleet finishes 2 requests/s while 5/s arrive: the gateway's arrival counter
/// is the demand, not the completions the capacity caps.
#[test]
fn gateway_arrivals_are_the_demand_not_completions() {
    let mut m = ModelMetrics::default();
    for step in 0..=6 {
        let t = f64::from(step) * 10.0;
        m.record(
            t,
            &gateway_round(gateway_reading(2.0 * t, Some(5.0 * t), 3.0 * t)),
            120.0,
        );
    }
    let demand = m.view(60.0, 60.0, 10.0, 30.0).demand.expect("fresh");
    assert_eq!(demand.source, DemandSource::GatewayArrivals);
    assert!((demand.arrival_requests_per_s.stable - 5.0).abs() < 1e-9);
    assert!((demand.arrival_requests_per_s.panic - 5.0).abs() < 1e-9);
    assert_eq!(demand.completed_requests, 120, "completions still counted");
    assert_eq!(demand.mean_output_tokens_per_request, Some(100.0));
    assert_eq!(demand.queued_requests, 180);
}

/// A gateway exports its arrival counter at zero before any request: idle is zero arrivals,
/// not a fall back to completions.
#[test]
fn an_idle_gateway_counting_arrivals_reads_zero_arrivals() {
    let mut m = ModelMetrics::default();
    for t in [0.0, 10.0] {
        m.record(
            t,
            &gateway_round(gateway_reading(0.0, Some(0.0), 0.0)),
            120.0,
        );
    }
    let demand = m.view(10.0, 60.0, 10.0, 30.0).demand.expect("fresh");
    assert_eq!(demand.source, DemandSource::GatewayArrivals);
    assert_eq!(demand.arrival_requests_per_s, WindowedRate::default());
}

/// Without the gateway's arrivals (engines only, or an older gateway), completions stand in
/// and the view says so.
#[test]
fn without_gateway_arrivals_completions_stand_in() {
    let mut engines = ModelMetrics::default();
    let mut old_gateway = ModelMetrics::default();
    for step in 0..=6 {
        let t = f64::from(step) * 10.0;
        let reading = engine_reading(t * 50.0, t, t, 0.0, 4.0);
        engines.record(t, &round(vec![("pod-a", reading)]), 120.0);
        old_gateway.record(
            t,
            &gateway_round(gateway_reading(2.0 * t, None, 0.0)),
            120.0,
        );
    }
    let demand = engines.view(60.0, 60.0, 10.0, 30.0).demand.expect("fresh");
    assert_eq!(demand.source, DemandSource::EngineCompletions);
    assert!((demand.arrival_requests_per_s.stable - 1.0).abs() < 1e-9);
    let demand = old_gateway
        .view(60.0, 60.0, 10.0, 30.0)
        .demand
        .expect("fresh");
    assert_eq!(demand.source, DemandSource::EngineCompletions);
    assert!((demand.arrival_requests_per_s.stable - 2.0).abs() < 1e-9);
}

/// Two gateway pods and two engines while a batch runs: the batch figures are read (the shared
/// ones once, the pods' lines in flight summed), and the batch lines the engines count among
/// their waiting and running requests are taken off, waiting first: batch work never reads as
/// interactive demand. The gateway's interactive series never held it.
#[test]
fn batch_lines_are_read_apart_and_taken_off_the_engines_counts() {
    let mut m = ModelMetrics::default();
    for step in 0..=6 {
        let t = f64::from(step) * 10.0;
        let pod = |in_flight: f64| {
            let mut reading = gateway_reading(t, Some(t), 2.0);
            reading
                .counters
                .insert(keys::GW_BATCH_TOKENS.to_string(), 150.0 * t);
            reading.batch = BatchGauges {
                required_output_tokens_per_s: 400.0,
                backlog_output_tokens: 1e6,
                in_flight_requests: in_flight,
            };
            reading
        };
        // Each engine: 1 waiting, 4 running (see `engine_reading`).
        let engine = || engine_reading(t * 500.0, t, t, 0.0, 4.0);
        let readings = vec![
            ("gw-a".to_string(), TargetKind::Gateway, pod(3.0)),
            ("gw-b".to_string(), TargetKind::Gateway, pod(2.0)),
            ("pod-a".to_string(), TargetKind::Engine, engine()),
            ("pod-b".to_string(), TargetKind::Engine, engine()),
        ];
        m.record(
            t,
            &ScrapeRound {
                readings,
                failed: 0,
            },
            120.0,
        );
    }
    let demand = m.view(60.0, 60.0, 10.0, 30.0).demand.expect("fresh");
    assert_eq!(
        demand.batch,
        BatchDemand {
            required_output_tokens_per_s: 400.0,
            backlog_output_tokens: 1e6,
            output_tokens_per_s: WindowedRate {
                stable: 300.0,
                panic: 300.0
            },
            in_flight_requests: 5,
        }
    );
    // Interactive: the gateway's own tokens (100 a request, 2 requests/s over two pods).
    assert!((demand.output_tokens_per_s.stable - 200.0).abs() < 1e-9);
    // Waiting: 2 + 2 at the gateways and 1 + 1 at the engines; 5 batch lines in flight take
    // the engines' 2 waiting and 3 of their 8 running.
    assert_eq!((demand.queued_requests, demand.running_requests), (4, 5));
}

#[test]
fn without_batch_series_the_batch_figures_are_zero() {
    let mut m = ModelMetrics::default();
    for t in [0.0, 10.0] {
        m.record(t, &gateway_round(gateway_reading(t, Some(t), 1.0)), 120.0);
    }
    let demand = m.view(10.0, 60.0, 10.0, 30.0).demand.expect("fresh");
    assert_eq!(demand.batch, BatchDemand::default());
    assert!(!demand.batch.pending());
    assert_eq!(demand.queued_requests, 1);
}

#[test]
fn each_replicas_own_start_reaches_the_view_by_pod_name() {
    let mut m = ModelMetrics::default();
    let start = EngineStart {
        fetch_s: 30.0,
        load_s: 5.0,
        ..EngineStart::default()
    };
    let timed = Reading {
        start: Some(start),
        ..engine_reading(0.0, 0.0, 0.0, 0.0, 0.0)
    };
    let vllm = engine_reading(0.0, 0.0, 0.0, 0.0, 0.0);
    m.record(0.0, &round(vec![("pod-a", timed), ("pod-b", vllm)]), 120.0);
    // One round is too little history for demand; the starts are there all the same.
    let view = m.view(0.0, 60.0, 10.0, 30.0);
    assert_eq!(
        view.engine_starts.into_iter().collect::<Vec<_>>(),
        vec![("pod-a".to_string(), start)]
    );
}

#[test]
fn the_view_carries_the_engines_caps_and_the_gateways_win_when_it_sets_any() {
    let mut m = ModelMetrics::default();
    let capped = |running: f64| Reading {
        cap: Some(ConcurrencyCap::one(
            crate::autoscaler::CapSource::Engine,
            8.0,
            running,
        )),
        ..engine_reading(100.0, 2.0, 2.0, 0.0, running)
    };
    m.record(
        0.0,
        &round(vec![("pod-a", capped(8.0)), ("pod-b", capped(8.0))]),
        120.0,
    );
    let cap = m.view(0.0, 60.0, 10.0, 30.0).concurrency_cap;
    assert_eq!(
        cap.map(|c| (c.replicas, c.per_replica, c.at_cap)),
        Some((2, 8.0, 2))
    );
    let mut with_gateway = round(vec![("pod-a", capped(8.0))]);
    let gateway_cap = ConcurrencyCap::one(crate::autoscaler::CapSource::Gateway, 3.0, 1.0);
    with_gateway.readings.push((
        "gateway".to_string(),
        TargetKind::Gateway,
        Reading {
            cap: Some(gateway_cap),
            ..gateway_reading(1.0, Some(1.0), 0.0)
        },
    ));
    m.record(10.0, &with_gateway, 120.0);
    assert_eq!(
        m.view(10.0, 60.0, 10.0, 30.0).concurrency_cap,
        Some(gateway_cap)
    );
}
