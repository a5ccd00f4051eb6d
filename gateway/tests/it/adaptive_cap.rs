//! The adaptive in-flight cap per replica (`models[].slo`): against a fake engine whose
//! per-token delay grows with its concurrency, the cap finds the knee, the engine's TPOT
//! stays within the target and the excess waits in the gateway's queue; without an SLO,
//! every request goes through as before.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::*;

const CLIENTS: usize = 32;
/// The fake engine: 5 ms per token plus 2 ms per stream it sends at once.
const BASE_MS: u64 = 5;
const PER_STREAM_US: u64 = 2_000;
/// The TPOT target: the knee is about 12 streams (the gateway's measure of a 16-token
/// stream adds its three closing events to the 15 token gaps).
const TPOT_TARGET_MS: u64 = 40;

fn yaml(replica: &MockReplica, slo: &str) -> String {
    format!(
        "models:\n  - name: m\n    upstreams: [\"{}\"]\n    replica_concurrency: {CLIENTS}\n    engine: vllm\n{slo}tenants:\n  - name: t\n    keys: [\"{}\"]\nhealth: {{interval_ms: 50, stale_after_ms: 1000, timeout_ms: 500}}\n",
        replica.url,
        tokenscale_gateway::auth::hash_key("key-a"),
    )
}

async fn slow_under_load() -> MockReplica {
    let replica = MockReplica::start().await;
    let state = &replica.state;
    state.tokens.store(16, Ordering::SeqCst);
    state.token_delay_ms.store(BASE_MS, Ordering::SeqCst);
    state
        .token_delay_per_stream_us
        .store(PER_STREAM_US, Ordering::SeqCst);
    replica
}

/// `CLIENTS` clients streaming back to back until `until`; the statuses they got.
async fn load(client: &TestClient, until: Instant) -> Vec<u16> {
    let body = serde_json::json!({"model": "m", "prompt": "hi", "max_tokens": 16, "stream": true});
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, body) = (client.clone(), body.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                while statuses.is_empty() || Instant::now() < until {
                    let reply = client.post("/v1/completions", Some("key-a"), &body).await;
                    statuses.push(reply.status.as_u16());
                }
                statuses
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.extend(task.await.expect("client task"));
    }
    statuses
}

/// The replica's adaptive cap on `/metrics` ("absent" without one).
async fn cap_of(client: &TestClient, replica: &MockReplica) -> String {
    let name = "tokenscale_gateway_replica_concurrency_limit";
    let labels = format!("model_name=\"m\",replica=\"{}\"", replica.url);
    series(client, &format!("{name}{{{labels}}}")).await
}

fn p95(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    let rank = (values.len() * 95).div_ceil(100);
    values.get(rank.saturating_sub(1)).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_the_tpot_target_and_the_excess_waits() {
    let replica = slow_under_load().await;
    let slo = format!("    slo: {{tpot_p95_ms: {TPOT_TARGET_MS}}}\n");
    let (running, client) = gateway(&yaml(&replica, &slo)).await;
    wait_ready(&running, "m", 1).await;
    let start = Instant::now();
    let running_load = tokio::spawn({
        let client = client.clone();
        async move { load(&client, start + Duration::from_secs(14)).await }
    });
    // The cap starts at replica_concurrency and settles within a few windows of 20.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let streams = &replica.state.streams;
    streams
        .peak
        .store(streams.now.load(Ordering::SeqCst), Ordering::SeqCst);
    streams.delays_us.lock().expect("delays").clear();
    let statuses = running_load.await.expect("load");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    let peak = streams.peak.load(Ordering::SeqCst);
    let delays = std::mem::take(&mut *streams.delays_us.lock().expect("delays"));
    let tpot_p95_ms = p95(delays) as f64 / 1000.0;
    let cap = cap_of(&client, &replica).await;
    let queued = series(
        &client,
        "tokenscale_gateway_arrivals_total{model_name=\"m\",outcome=\"queued\"}",
    )
    .await;
    println!(
        "adaptive cap {cap}, engine streams peak {peak}, engine TPOT p95 {tpot_p95_ms} ms, queued {queued}"
    );
    let cap: f64 = cap.parse().unwrap_or_else(|_| panic!("cap series: {cap}"));
    assert!((1.0..=16.0).contains(&cap), "cap {cap}, knee about 12");
    assert!(
        peak <= 16,
        "the engine saw {peak} streams at once after settling"
    );
    assert!(
        tpot_p95_ms <= TPOT_TARGET_MS as f64,
        "engine TPOT p95 {tpot_p95_ms} ms over the {TPOT_TARGET_MS} ms target"
    );
    let queued: f64 = queued.parse().unwrap_or(0.0);
    assert!(queued > 0.0, "the excess waited in the queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_slo_every_request_goes_through_at_once() {
    let replica = slow_under_load().await;
    let (running, client) = gateway(&yaml(&replica, "")).await;
    wait_ready(&running, "m", 1).await;
    let statuses = load(&client, Instant::now()).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let peak = replica.state.streams.peak.load(Ordering::SeqCst);
    assert!(
        peak >= 24,
        "the engine saw only {peak} of {CLIENTS} streams at once"
    );
    let cap = cap_of(&client, &replica).await;
    assert_eq!(cap, "absent");
}
