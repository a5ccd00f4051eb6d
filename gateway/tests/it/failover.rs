//! Replicas failing: requests that reached no client byte are retried elsewhere (connect
//! errors, resets, header timeouts, hung bodies), never run twice once complete; broken
//! streams continue on another replica as exact continuations (token ids) or as text (engines
//! without them), counted once in the metrics and the limiter; a silent replica is timed
//! out; the replica gets work again once it is back.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;

use crate::support::*;

/// The mock model's whole answer of `n` tokens.
fn answer(n: u64) -> String {
    (0..n).map(|i| format!("tok{i} ")).collect()
}

/// Text, ids, usage and error events of a client stream.
struct Stream {
    text: String,
    ids: std::collections::BTreeSet<String>,
    usage: Option<serde_json::Value>,
    errors: Vec<String>,
    done: bool,
}

fn read_stream(body: &str) -> Stream {
    let mut out = Stream {
        text: String::new(),
        ids: Default::default(),
        usage: None,
        errors: Vec::new(),
        done: false,
    };
    for data in body.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        if data == "[DONE]" {
            out.done = true;
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(data).expect("event JSON");
        assert!(
            v.get("tokenscale_token_ids").is_none(),
            "token ids reached the client: {data}"
        );
        if v.get("error").is_some() {
            out.errors.push(data.to_string());
            continue;
        }
        out.ids.insert(format!("{} {}", v["id"], v["created"]));
        for c in v["choices"].as_array().into_iter().flatten() {
            out.text.push_str(
                c["text"]
                    .as_str()
                    .or(c["delta"]["content"].as_str())
                    .unwrap_or(""),
            );
        }
        if v["usage"].is_object() {
            out.usage = Some(v["usage"].clone());
        }
    }
    out
}

/// Opens a stream of `body` and reads `events` of its events; returns the upstream it came
/// from, what was read, and the rest of the body.
async fn open_stream(
    client: &TestClient,
    path: &str,
    body: &serde_json::Value,
    events: usize,
) -> (String, String, hyper::body::Incoming) {
    let response = client
        .open(
            "POST",
            path,
            &[
                ("content-type", "application/json"),
                ("authorization", "Bearer key-a"),
            ],
            body.to_string(),
        )
        .await;
    assert_eq!(response.status(), 200);
    let upstream = response.headers()["x-tokenscale-upstream"]
        .to_str()
        .expect("ascii")
        .to_string();
    let mut body = response.into_body();
    let mut read = String::new();
    while read.matches("data: ").count() < events {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("a frame in time")
            .expect("a frame")
            .expect("no error");
        read.push_str(std::str::from_utf8(frame.data_ref().expect("data")).expect("utf-8"));
    }
    (upstream, read, body)
}

async fn finish(read: String, body: hyper::body::Incoming) -> Stream {
    let rest = tokio::time::timeout(Duration::from_secs(20), body.collect())
        .await
        .expect("the stream ends, no hang")
        .expect("body")
        .to_bytes();
    read_stream(&format!("{read}{}", String::from_utf8_lossy(&rest)))
}

fn metric(metrics: &str, line_start: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_fails_over_and_comes_back() {
    let (a, b) = (MockReplica::start().await, MockReplica::start().await);
    for r in [&a, &b] {
        r.state.token_delay_ms.store(100, Ordering::SeqCst);
        r.state.tokens.store(30, Ordering::SeqCst);
    }
    let (running, client) =
        gateway(&config(&[&a, &b], "{}", "    affinity_prefix_chars: 0\n")).await;
    wait_ready(&running, "m", 2).await;

    // Open 4 streams (spread over both replicas) and read their first chunks.
    let mut streams = Vec::new();
    for i in 0..4 {
        let body = serde_json::json!({"model": "m", "prompt": format!("s{i}"), "max_tokens": 30, "stream": true});
        streams.push(open_stream(&client, "/v1/completions", &body, 2).await);
    }
    assert!(
        streams.iter().any(|(u, _, _)| *u == a.url),
        "no stream landed on a"
    );
    // Non-streaming requests that will be in flight on `a` when it dies.
    a.state.delay_ms.store(300, Ordering::SeqCst);
    let mut pending = Vec::new();
    for i in 0..4 {
        let client = client.clone();
        pending.push(tokio::spawn(async move {
            client
                .post(
                    "/v1/completions",
                    Some("key-a"),
                    &completion_body(&format!("n{i}"), 3),
                )
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (a_addr, a_state) = (a.addr, a.state.clone());
    a.kill();

    let mut continued = 0;
    for (upstream, read, body) in streams {
        let stream = finish(read, body).await;
        // Every stream is the whole answer, once, under one id, whichever replica died.
        assert!(
            stream.errors.is_empty() && stream.done,
            "{:?}",
            stream.errors
        );
        assert_eq!(stream.text, answer(30), "from {upstream}");
        assert_eq!(stream.ids.len(), 1, "{:?}", stream.ids);
        continued += usize::from(upstream == a.url);
    }
    for request in pending {
        let reply = request.await.expect("joins");
        assert_eq!(
            reply.status, 200,
            "non-streaming request must be retried on b: {}",
            reply.body
        );
        assert_eq!(reply.upstream(), b.url);
    }
    // b continued a's streams exactly, from the token ids sent.
    let resumed: Vec<_> = b
        .state
        .bodies
        .lock()
        .expect("bodies")
        .iter()
        .filter(|body| body.get("tokenscale_resume").is_some())
        .cloned()
        .collect();
    assert_eq!(resumed.len(), continued, "{resumed:?}");
    let metrics = client.metrics().await;
    assert!(
        metrics.contains("tokenscale_gateway_upstream_errors_total{"),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "tokenscale_gateway_stream_interruptions_total{model_name=\"m\",continuation=\"exact\",result=\"resumed\"}"
        ),
        continued as f64,
        "{metrics}"
    );
    assert!(!metrics.contains("result=\"failed\""), "{metrics}");

    // Bring `a` back on its port: the recovery probe readmits it and it gets work again.
    a_state.delay_ms.store(0, Ordering::SeqCst);
    let back = MockReplica::start_on(a_addr, a_state).await;
    wait_ready(&running, "m", 2).await;
    let mut served_by_a = false;
    for i in 0..40 {
        let reply = client
            .post(
                "/v1/completions",
                Some("key-a"),
                &completion_body(&format!("after {i}"), 2),
            )
            .await;
        assert_eq!(reply.status, 200);
        if reply.upstream() == back.url {
            served_by_a = true;
            break;
        }
    }
    assert!(served_by_a, "the recovered replica never got work");
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_from_an_engine_without_token_ids_continues_as_text() {
    for chat in [false, true] {
        let (a, b) = (MockReplica::start().await, MockReplica::start().await);
        for r in [&a, &b] {
            r.state.token_delay_ms.store(60, Ordering::SeqCst);
            r.state.tokens.store(20, Ordering::SeqCst);
            r.state.no_token_ids.store(true, Ordering::SeqCst);
        }
        // Only `a` is there when the stream starts.
        b.state.unhealthy.store(true, Ordering::SeqCst);
        let (running, client) = gateway(&config(&[&a, &b], "{}", "")).await;
        wait_ready(&running, "m", 1).await;
        let mut body = serde_json::json!({"model": "m", "max_tokens": 20, "seed": 9, "stream": true,
            "stream_options": {"include_usage": true}});
        let path = if chat {
            body["messages"] = serde_json::json!([{"role": "user", "content": "go "}]);
            "/v1/chat/completions"
        } else {
            body["prompt"] = serde_json::json!("go ");
            "/v1/completions"
        };
        let (upstream, read, rest) = open_stream(&client, path, &body, 6).await;
        assert_eq!(upstream, a.url);
        b.state.unhealthy.store(false, Ordering::SeqCst);
        wait_ready(&running, "m", 2).await;
        a.kill();
        let stream = finish(read, rest).await;
        assert!(
            stream.errors.is_empty() && stream.done,
            "{:?}",
            stream.errors
        );
        assert_eq!(stream.text, answer(20), "chat: {chat}");
        assert_eq!(stream.ids.len(), 1, "{:?}", stream.ids);
        // The whole answer's usage: b's prompt held the moved text, which is completion here.
        let usage = stream.usage.expect("usage");
        assert_eq!(usage["completion_tokens"], 20, "{usage}");
        let sent = b
            .state
            .last_body
            .lock()
            .expect("body")
            .clone()
            .expect("b got a request");
        let moved = if chat {
            assert_eq!(sent["continue_final_message"], true);
            assert_eq!(sent["messages"][1]["role"], "assistant");
            sent["messages"][1]["content"]
                .as_str()
                .expect("text")
                .to_string()
        } else {
            sent["prompt"]
                .as_str()
                .expect("prompt")
                .trim_start_matches("go ")
                .to_string()
        };
        let moved_tokens = moved.matches("tok").count() as u64;
        assert!(
            moved_tokens >= 1 && answer(20).starts_with(&moved),
            "{moved:?}"
        );
        assert_eq!(
            sent["max_tokens"].as_u64(),
            Some(20 - moved_tokens),
            "{sent}"
        );
        assert_ne!(sent["seed"], 9, "a derived seed");
        let metrics = client.metrics().await;
        assert_eq!(
            metric(
                &metrics,
                "tokenscale_gateway_stream_interruptions_total{model_name=\"m\",continuation=\"textual\",result=\"resumed\"}"
            ),
            1.0,
            "{metrics}"
        );
        running.shutdown().await.expect("clean shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_replica_times_out_and_its_stream_continues_elsewhere() {
    let (a, b) = (MockReplica::start().await, MockReplica::start().await);
    for r in [&a, &b] {
        r.state.token_delay_ms.store(20, Ordering::SeqCst);
        r.state.tokens.store(30, Ordering::SeqCst);
    }
    a.state.hang_after.store(8, Ordering::SeqCst);
    b.state.unhealthy.store(true, Ordering::SeqCst);
    let yaml = config(&[&a, &b], "{}", "") + "upstream: {stream_idle_timeout_ms: 300}\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "prompt": "x", "max_tokens": 30, "stream": true});
    let (upstream, read, rest) = open_stream(&client, "/v1/completions", &body, 4).await;
    assert_eq!(upstream, a.url);
    b.state.unhealthy.store(false, Ordering::SeqCst);
    let started = Instant::now();
    let stream = finish(read, rest).await;
    assert!(
        stream.errors.is_empty() && stream.done,
        "{:?}",
        stream.errors
    );
    assert_eq!(stream.text, answer(30));
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    let metrics = client.metrics().await;
    assert!(metrics.contains("kind=\"idle\""), "{metrics}");
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstarted_requests_are_retried_on_timeouts_and_hung_bodies_but_never_run_twice() {
    let (a, b) = (MockReplica::start().await, MockReplica::start().await);
    let yaml = config(&[&a, &b], "{}", "    affinity_prefix_chars: 0\n")
        + "upstream: {response_timeout_ms: 400}\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 2).await;
    // A replica too slow to send its headers, then one that hangs mid-body: each request
    // lands elsewhere, whole.
    for slow in [true, false] {
        if slow {
            a.state.delay_ms.store(2000, Ordering::SeqCst);
        } else {
            a.state.delay_ms.store(0, Ordering::SeqCst);
            a.state.hang_after.store(1, Ordering::SeqCst);
        }
        for i in 0..6 {
            let reply = client
                .post(
                    "/v1/completions",
                    Some("key-a"),
                    &completion_body(&format!("r{slow}{i}"), 4),
                )
                .await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            assert_eq!(reply.upstream(), b.url);
            assert_eq!(reply.json()["choices"][0]["text"], answer(4));
        }
        wait_ready(&running, "m", 2).await;
    }
    // A complete answer is never asked for again.
    a.state.hang_after.store(0, Ordering::SeqCst);
    wait_ready(&running, "m", 2).await;
    let before = a.requests() + b.requests();
    for i in 0..6 {
        let reply = client
            .post(
                "/v1/completions",
                Some("key-a"),
                &completion_body(&format!("once{i}"), 4),
            )
            .await;
        assert_eq!(reply.status, 200);
    }
    assert_eq!(a.requests() + b.requests(), before + 6);
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_resumption_budget_a_broken_stream_ends_with_an_error_event() {
    let (a, b) = (MockReplica::start().await, MockReplica::start().await);
    for r in [&a, &b] {
        r.state.token_delay_ms.store(50, Ordering::SeqCst);
        r.state.tokens.store(20, Ordering::SeqCst);
    }
    b.state.unhealthy.store(true, Ordering::SeqCst);
    let yaml = config(&[&a, &b], "{}", "") + "upstream: {max_resumptions: 0}\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "prompt": "x", "max_tokens": 20, "stream": true});
    let (_, read, rest) = open_stream(&client, "/v1/completions", &body, 3).await;
    b.state.unhealthy.store(false, Ordering::SeqCst);
    a.kill();
    let stream = finish(read, rest).await;
    assert_eq!(stream.errors.len(), 1, "{:?}", stream.text);
    assert!(
        stream.errors[0].contains("could not be continued"),
        "{:?}",
        stream.errors
    );
    assert!(stream.done);
    let metrics = client.metrics().await;
    assert!(
        metrics.contains("continuation=\"none\",result=\"failed\"} 1"),
        "{metrics}"
    );
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_stream_is_counted_and_charged_once() {
    let (a, b) = (MockReplica::start().await, MockReplica::start().await);
    for r in [&a, &b] {
        r.state.token_delay_ms.store(20, Ordering::SeqCst);
        r.state.tokens.store(60, Ordering::SeqCst);
    }
    b.state.unhealthy.store(true, Ordering::SeqCst);
    // 600 output tokens a minute: 10 a second come back, slowly enough to see 60 charged.
    let limits = "{output_tokens_per_minute: 600}";
    let (running, client) = gateway(&config(&[&a, &b], limits, "")).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "prompt": "x", "max_tokens": 200, "stream": true,
        "stream_options": {"include_usage": true}});
    let reserved = Instant::now();
    let (_, read, rest) = open_stream(&client, "/v1/completions", &body, 5).await;
    b.state.unhealthy.store(false, Ordering::SeqCst);
    wait_ready(&running, "m", 2).await;
    a.kill();
    let stream = finish(read, rest).await;
    assert_eq!(stream.text, answer(60));
    assert_eq!(stream.usage.expect("usage")["completion_tokens"], 60);
    let next = client
        .post("/v1/completions", Some("key-a"), &completion_body("y", 100))
        .await;
    assert_eq!(next.status, 200, "{}", next.body);
    let remaining = next.remaining("output-tokens") as f64;
    // Charged once for the whole answer's 60 tokens, the next 100 reserved: 440 plus what
    // refilled since the first reservation (twice would leave 380 plus that, none 500).
    let refill = 10.0 * reserved.elapsed().as_secs_f64();
    assert!(
        (440.0..=441.0 + refill).contains(&remaining) && remaining < 500.0,
        "remaining {remaining} after {:?}",
        reserved.elapsed()
    );
    let metrics = client.metrics().await;
    assert!(
        metrics.contains("tokenscale_gateway_generation_tokens_total{model_name=\"m\"} 120"),
        "60 for each request, each once: {metrics}"
    );
    running.shutdown().await.expect("clean shutdown");
}
