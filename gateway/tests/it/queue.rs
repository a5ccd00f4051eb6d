//! Scale from zero: requests wait for a replica within their deadline, 503 after it.

use std::time::{Duration, Instant};

use crate::support::*;

fn zero_replica_config() -> String {
    format!(
        "models:\n  - name: m\n    upstreams: []\ntenants:\n  - name: t\n    keys: [\"{}\"]\nhealth: {{interval_ms: 50, stale_after_ms: 1000, timeout_ms: 500}}\n",
        tokenscale_gateway::auth::hash_key("key-a")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_for_the_first_replica_and_503s_past_its_deadline() {
    let (running, client) = gateway(&zero_replica_config()).await;
    let headers = |deadline: &'static str| {
        [
            ("content-type", "application/json"),
            ("authorization", "Bearer key-a"),
            ("x-tokenscale-deadline-ms", deadline),
        ]
    };
    let body = completion_body("hello", 4).to_string();

    // No replica at all: a short deadline expires with 503 + retry-after.
    let started = Instant::now();
    let expired = client
        .send("POST", "/v1/completions", &headers("300"), body.clone())
        .await;
    assert_eq!(expired.status, 503, "{}", expired.body);
    assert!(expired.header("retry-after").is_some());
    assert!(started.elapsed() >= Duration::from_millis(290));

    // A request with a 10 s deadline waits; the queue reports it; a replica registers.
    let waiting = tokio::spawn({
        let client = client.clone();
        let body = body.clone();
        async move {
            client
                .send("POST", "/v1/completions", &headers("10000"), body)
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let metrics = client.metrics().await;
    assert!(
        metrics.contains("tokenscale_gateway_queue_depth{model_name=\"m\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tokenscale_gateway_queued_tokens{model_name=\"m\"} 6"),
        "{metrics}"
    );
    let replica = MockReplica::start().await;
    running.registry.add("m", &replica.url).expect("valid url");
    let reply = waiting.await.expect("joins");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(replica.requests(), 1);

    // Drained: no new work goes to it, requests wait again and expire.
    assert!(running.registry.drain("m", &replica.url));
    let drained = client
        .send("POST", "/v1/completions", &headers("200"), body)
        .await;
    assert_eq!(drained.status, 503);
    assert_eq!(replica.requests(), 1);
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_requests_are_admitted_before_batch_ones() {
    let replica = MockReplica::start().await;
    replica
        .state
        .delay_ms
        .store(200, std::sync::atomic::Ordering::SeqCst);
    let yaml =
        config(&[&replica], "{}", "").replace("replica_concurrency: 8", "replica_concurrency: 1");
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let send = |priority: &'static str, prompt: &'static str| {
        let client = client.clone();
        tokio::spawn(async move {
            let headers = [
                ("content-type", "application/json"),
                ("authorization", "Bearer key-a"),
                ("x-tokenscale-priority", priority),
            ];
            let reply = client
                .send(
                    "POST",
                    "/v1/completions",
                    &headers,
                    completion_body(prompt, 2).to_string(),
                )
                .await;
            (reply.status, Instant::now())
        })
    };
    let occupying = send("interactive", "first");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let batch = send("batch", "batch");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let interactive = send("interactive", "late interactive");
    let (s0, _) = occupying.await.expect("joins");
    let (s1, batch_done) = batch.await.expect("joins");
    let (s2, interactive_done) = interactive.await.expect("joins");
    assert_eq!((s0.as_u16(), s1.as_u16(), s2.as_u16()), (200, 200, 200));
    assert!(
        interactive_done < batch_done,
        "the later interactive request must go first"
    );
    running.shutdown().await.expect("clean shutdown");
}

/// Scale from zero: a model with no ready replica whose cold start discovery knows holds
/// requests without their own deadline for the cold start plus the TTFT SLO, not the
/// interactive default; without that knowledge, the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_at_zero_holds_requests_for_its_cold_start_plus_the_ttft_slo() {
    let yaml =
        zero_replica_config() + "queue: {interactive_timeout_ms: 200, cold_start_ms: 1500}\n";
    let (running, client) = gateway(&yaml).await;
    let headers = [
        ("content-type", "application/json"),
        ("authorization", "Bearer key-a"),
    ];
    let body = completion_body("hello", 4).to_string();

    // Nothing known of its cold start: the 200 ms interactive default.
    let started = Instant::now();
    let expired = client
        .send("POST", "/v1/completions", &headers, body.clone())
        .await;
    assert_eq!(expired.status, 503, "{}", expired.body);
    assert!(started.elapsed() < Duration::from_millis(1500));

    // Known: held 1.5 s + 0.5 s; a replica ready after 0.6 s serves it.
    running.registry.set_cold_start(
        "m",
        Some(tokenscale_gateway::routing::ColdStart {
            expected: None,
            ttft_slo: Duration::from_millis(500),
        }),
    );
    let waiting = tokio::spawn({
        let client = client.clone();
        let body = body.clone();
        async move { client.send("POST", "/v1/completions", &headers, body).await }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!waiting.is_finished(), "held past the interactive default");
    let replica = MockReplica::start().await;
    running.registry.add("m", &replica.url).expect("valid url");
    let reply = waiting.await.expect("joins");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(replica.requests(), 1);

    running.shutdown().await.expect("clean shutdown");
}
