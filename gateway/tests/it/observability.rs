//! `/metrics` passes promtool and carries the client-side latencies, on the admin listener
//! only; `/v1/models` lists models.

use std::sync::atomic::Ordering;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_and_show_client_latencies() {
    let replica = MockReplica::start().await;
    replica.state.token_delay_ms.store(20, Ordering::SeqCst);
    let (running, client) = gateway(&config(&[&replica], "{requests_per_minute: 2}", "")).await;
    wait_ready(&running, "m", 1).await;
    let stream = serde_json::json!({"model": "m", "prompt": "hi", "stream": true, "max_tokens": 4});
    assert_eq!(
        client
            .post("/v1/completions", Some("key-a"), &stream)
            .await
            .status,
        200
    );
    assert_eq!(
        client
            .post("/v1/completions", Some("key-a"), &completion_body("x", 2))
            .await
            .status,
        200
    );
    assert_eq!(
        client
            .post("/v1/completions", Some("key-a"), &completion_body("x", 2))
            .await
            .status,
        429
    );

    let text = client.metrics().await;
    for needle in [
        "tokenscale_gateway_requests_total{model_name=\"m\",status=\"200\"} 2",
        "tokenscale_gateway_requests_total{model_name=\"m\",status=\"429\"} 1",
        "tokenscale_gateway_time_to_first_token_seconds_count{model_name=\"m\"} 1",
        "tokenscale_gateway_time_per_output_token_seconds_count{model_name=\"m\"} 1",
        "tokenscale_gateway_e2e_request_latency_seconds_count{model_name=\"m\"} 2",
        "tokenscale_gateway_replicas{model_name=\"m\",state=\"ready\"} 1",
        "tokenscale_gateway_replica_kv_cache_usage_perc{model_name=\"m\",replica=\"",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    let dir = tokenscale_scratch::scratch!("gw-metrics");
    let file = dir.join("metrics.txt");
    std::fs::write(&file, &text).expect("write");
    let output = std::process::Command::new("promtool")
        .arg("check")
        .arg("metrics")
        .stdin(std::fs::File::open(&file).expect("open"))
        .output()
        .expect("promtool runs (scripts/setup installs Debian `prometheus`)");
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // The list needs a key (or the anonymous tenant) and shows the tenant's models.
    let keyless = client.send("GET", "/v1/models", &[], "").await;
    assert_eq!(keyless.status, 401);
    let models = client
        .send(
            "GET",
            "/v1/models",
            &[("authorization", "Bearer key-a")],
            "",
        )
        .await
        .json();
    assert_eq!(models["data"][0]["id"], "m");
    assert_eq!(client.send("GET", "/health", &[], "").await.status, 200);
    running.shutdown().await.expect("clean shutdown");
}

/// The value of the sample `name` (labels included) in Prometheus text.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name}:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_to_first_token_counts_from_the_first_content_not_the_chat_role_chunk() {
    // Like a real engine: the role chunk at once, the first token after a 400 ms prefill.
    let replica = MockReplica::start().await;
    replica.state.prefill_delay_ms.store(400, Ordering::SeqCst);
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    let chat = serde_json::json!({
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "stream": true, "max_tokens": 4,
    });
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &chat)
        .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.body.contains("\"role\":\"assistant\""),
        "{}",
        reply.body
    );
    let text = client.metrics().await;
    let ttft = sample(
        &text,
        "tokenscale_gateway_time_to_first_token_seconds_sum{model_name=\"m\"}",
    );
    let tpot = sample(
        &text,
        "tokenscale_gateway_time_per_output_token_seconds_sum{model_name=\"m\"}",
    );
    // Timed from the role chunk, TTFT would be ~0 and the prefill would land in TPOT
    // (at least 400 ms / 3 per token).
    assert!(ttft >= 0.4, "TTFT {ttft} s misses the 0.4 s prefill");
    assert!(tpot < 0.4 / 3.0, "TPOT {tpot} s holds the prefill");
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_on_the_admin_listener_only() {
    let replica = MockReplica::start().await;
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    let unknown = client.send("GET", "/no-such-path", &[], "").await;
    for auth in [None, Some("Bearer key-a")] {
        let headers: Vec<_> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let reply = client.send("GET", "/metrics", &headers, "").await;
        assert_eq!(
            reply.status, 404,
            "API port /metrics with {auth:?}: {}",
            reply.body
        );
        // The same answer as any unknown path: nothing that names a model or a tenant.
        assert_eq!(
            reply.body.replace("/metrics", "/no-such-path"),
            unknown.body,
            "API port /metrics with {auth:?}"
        );
    }
    let text = client.metrics().await;
    assert!(
        text.contains("tokenscale_gateway_replicas{model_name=\"m\",state=\"ready\"} 1"),
        "{text}"
    );
    for listener in [client.addr, running.admin_addr] {
        let health = TestClient::new(listener)
            .send("GET", "/health", &[], "")
            .await;
        assert_eq!(
            (health.status.as_u16(), health.body.as_str()),
            (200, "ok"),
            "{listener}"
        );
    }
    let admin = TestClient::new(running.admin_addr);
    let chat = admin
        .post(
            "/v1/chat/completions",
            Some("key-a"),
            &completion_body("x", 2),
        )
        .await;
    assert_eq!(
        chat.status, 404,
        "the admin port serves no API: {}",
        chat.body
    );
    running.shutdown().await.expect("clean shutdown");
}
