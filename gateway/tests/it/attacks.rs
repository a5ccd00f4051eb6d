//! The attack list of issue 20, one test per item that the gateway alone can show: each
//! failed on the code before the fix.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::*;

/// A tenant `team-a` (key `key-a`) limited to model `other`, and `team-b` (key `key-b`) to `m*`.
fn two_tenants(replica: &MockReplica, extra: &str) -> String {
    format!(
        "models:\n  - name: m\n    upstreams: [\"{}\"]\n  - name: other\n    upstreams: [\"{}\"]\n{extra}tenants:\n  - name: team-a\n    keys: [\"{}\"]\n    models: [other]\n  - name: team-b\n    keys: [\"{}\"]\n    models: [\"m*\"]\nhealth: {{interval_ms: 50, stale_after_ms: 1000, timeout_ms: 500}}\n",
        replica.url,
        replica.url,
        tokenscale_gateway::auth::hash_key("key-a"),
        tokenscale_gateway::auth::hash_key("key-b"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_for_a_model_its_tenant_may_not_use_gets_the_unknown_model_404() {
    let replica = MockReplica::start().await;
    let (running, client) = gateway(&two_tenants(&replica, "")).await;
    wait_ready(&running, "m", 1).await;
    let refused = client
        .post("/v1/completions", Some("key-a"), &completion_body("hi", 2))
        .await;
    let unknown = client
        .post(
            "/v1/completions",
            Some("key-a"),
            &serde_json::json!({"model": "nope", "prompt": "hi"}),
        )
        .await;
    assert_eq!(refused.status, 404, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "model_not_found");
    // The same words as for a model that does not exist, so a key cannot probe the list.
    assert_eq!(
        refused.json()["error"]["message"]
            .as_str()
            .map(|m| m.replace("`m`", "`nope`")),
        unknown.json()["error"]["message"]
            .as_str()
            .map(str::to_string)
    );
    assert_eq!(replica.requests(), 0);
    let allowed = client
        .post("/v1/completions", Some("key-b"), &completion_body("hi", 2))
        .await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    // The model list shows each tenant its own models only.
    let listed = client
        .send(
            "GET",
            "/v1/models",
            &[("authorization", "Bearer key-a")],
            "",
        )
        .await
        .json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["other"]);
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_authorization_is_401_not_anonymous_and_x_api_key_is_honoured() {
    let replica = MockReplica::start().await;
    let yaml = config(&[&replica], "{}", "") + "anonymous: team-a\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let body = completion_body("hi", 2).to_string();
    let json = ("content-type", "application/json");
    for authorization in [
        "Basic a2V5LWE6",
        "",
        "Bearer",
        "Bearer ",
        "key-a",
        "Bearer a b",
    ] {
        let reply = client
            .send(
                "POST",
                "/v1/completions",
                &[json, ("authorization", authorization)],
                body.clone(),
            )
            .await;
        assert_eq!(reply.status, 401, "`{authorization}`: {}", reply.body);
        assert_eq!(reply.json()["error"]["code"], "invalid_api_key");
    }
    // A malformed Authorization beside a good x-api-key is still refused: which one was meant?
    let both = client
        .send(
            "POST",
            "/v1/completions",
            &[
                json,
                ("authorization", "Basic eA=="),
                ("x-api-key", "key-a"),
            ],
            body.clone(),
        )
        .await;
    assert_eq!(both.status, 401, "{}", both.body);
    // A wrong x-api-key is not anonymous either.
    let wrong = client
        .send(
            "POST",
            "/v1/completions",
            &[json, ("x-api-key", "wrong")],
            body.clone(),
        )
        .await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert_eq!(
        replica.requests(),
        0,
        "no refused request reached the replica"
    );
    // `bearer` in any case is the same scheme (RFC 9110 §11.1).
    let lower = client
        .send(
            "POST",
            "/v1/completions",
            &[json, ("authorization", "bearer key-a")],
            body,
        )
        .await;
    assert_eq!(lower.status, 200, "{}", lower.body);
    running.shutdown().await.expect("clean shutdown");
}

/// One replica slot (`replica_concurrency: 1`), held by a slow first request.
async fn one_slot_gateway(
    replica: &MockReplica,
    limits: &str,
) -> (tokenscale_gateway::RunningGateway, TestClient) {
    replica.state.delay_ms.store(400, Ordering::SeqCst);
    let yaml =
        config(&[replica], limits, "").replace("replica_concurrency: 8", "replica_concurrency: 1");
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    (running, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_client_deadline_does_not_jump_the_queue() {
    let replica = MockReplica::start().await;
    let (running, client) = one_slot_gateway(&replica, "{}").await;
    let send = |deadline: Option<&'static str>| {
        let client = client.clone();
        tokio::spawn(async move {
            let mut headers = vec![
                ("content-type", "application/json"),
                ("authorization", "Bearer key-a"),
            ];
            if let Some(deadline) = deadline {
                headers.push(("x-tokenscale-deadline-ms", deadline));
            }
            let body = completion_body("x", 2).to_string();
            let reply = client.send("POST", "/v1/completions", &headers, body).await;
            (reply.status, Instant::now())
        })
    };
    let occupying = send(None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let patient = send(None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let hurried = send(Some("5000"));
    let (s0, _) = occupying.await.expect("joins");
    let (s1, patient_done) = patient.await.expect("joins");
    let (s2, hurried_done) = hurried.await.expect("joins");
    assert_eq!((s0.as_u16(), s1.as_u16(), s2.as_u16()), (200, 200, 200));
    assert!(
        patient_done < hurried_done,
        "the request queued first is served first, whatever deadline the later one set"
    );
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_while_queued_gets_its_tokens_back() {
    let replica = MockReplica::start().await;
    let (running, client) = one_slot_gateway(&replica, "{output_tokens_per_minute: 2000}").await;
    let occupying = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post("/v1/completions", Some("key-a"), &completion_body("x", 10))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Queued behind it with 1500 output tokens reserved; the client gives up while waiting.
    let dropped = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post(
                    "/v1/completions",
                    Some("key-a"),
                    &completion_body("x", 1500),
                )
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    dropped.abort();
    assert_eq!(occupying.await.expect("joins").status, 200);
    // Settled at 4 of its 10 tokens; the dropped request's 1500 came back: 1500 fit again.
    let again = client
        .post(
            "/v1/completions",
            Some("key-a"),
            &completion_body("x", 1500),
        )
        .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(
        replica.requests(),
        2,
        "the dropped request never reached the replica"
    );
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed() {
    let replica = MockReplica::start().await;
    let yaml = config(&[&replica], "{}", "client_idle_timeout_ms: 300\n");
    let (running, _) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let stream = tokio::net::TcpStream::connect(running.addr)
        .await
        .expect("connects");
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2c handshake");
    let connection = tokio::spawn(connection);
    let request = http::Request::get(format!("http://{}/health", running.addr))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("answered");
    assert_eq!(response.status(), 200);
    drop(response);
    // Idle from now on: the gateway must end the connection soon after 300 ms.
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), connection).await;
    assert!(
        ended.is_ok(),
        "the idle HTTP/2 connection was still open after 5 s"
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_ends_after_the_idle_timeout_frees_its_slot_and_pays_what_was_sent() {
    let replica = MockReplica::start().await;
    replica.state.token_delay_ms.store(20, Ordering::SeqCst);
    replica.state.tokens.store(50, Ordering::SeqCst);
    // Five tokens, then silence with the connection held open (a hung engine).
    replica.state.hang_after.store(5, Ordering::SeqCst);
    // One slot, and no other replica to continue on: the queue timeout bounds that search.
    let yaml = config(&[&replica], "{output_tokens_per_minute: 600}", "")
        .replace("replica_concurrency: 8", "replica_concurrency: 1")
        + "upstream: {stream_idle_timeout_ms: 300}\nqueue: {interactive_timeout_ms: 500}\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "prompt": "x", "max_tokens": 200, "stream": true});
    let headers = [
        ("content-type", "application/json"),
        ("authorization", "Bearer key-a"),
    ];
    let started = Instant::now();
    let stalled = tokio::time::timeout(
        Duration::from_secs(10),
        client.send("POST", "/v1/completions", &headers, body.to_string()),
    )
    .await
    .expect("the stalled stream ends; the client is not held forever");
    assert_eq!(stalled.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let events: Vec<&str> = stalled
        .body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert!(
        events.iter().any(|e| e.contains("\"error\"")),
        "an error event ends it: {}",
        stalled.body
    );
    assert_eq!(events.last(), Some(&"[DONE]"), "{}", stalled.body);
    // The slot is free: with one slot held, this would wait out its 500 ms and get 503.
    replica.state.hang_after.store(0, Ordering::SeqCst);
    let next = client
        .post("/v1/completions", Some("key-a"), &completion_body("y", 100))
        .await;
    assert_eq!(next.status, 200, "{}", next.body);
    // Settled at the 5 tokens sent, not at the 200 reserved: 600 - 5 - 100 (capped at
    // 600 by the refill); the whole reservation kept would leave about 300.
    let remaining = next.remaining("output-tokens") as f64;
    assert!(
        (480.0..=500.0).contains(&remaining),
        "remaining {remaining}"
    );
    running.shutdown().await.expect("clean shutdown");
}
