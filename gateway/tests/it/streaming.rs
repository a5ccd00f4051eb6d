//! Streams pass through chunk by chunk; usage is always asked for and stripped when unwanted.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;

use crate::support::*;

fn data_events(text: &str) -> Vec<serde_json::Value> {
    text.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).expect("event JSON"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_requested_upstream_and_stripped_unless_asked_for() {
    let replica = MockReplica::start().await;
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;

    let plain = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": 4});
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &plain)
        .await;
    assert_eq!(reply.status, 200);
    let sent = replica
        .state
        .last_body
        .lock()
        .expect("body")
        .clone()
        .expect("a body");
    assert_eq!(
        sent["stream_options"]["include_usage"], true,
        "the gateway asks for usage"
    );
    assert_eq!(sent["messages"], plain["messages"], "nothing else changed");
    let events = data_events(&reply.body);
    // The role chunk, four tokens, the finish chunk; no usage chunk.
    assert_eq!(events.len(), 6);
    assert!(
        events.iter().all(|e| e.get("usage").is_none()),
        "usage chunk must be stripped: {}",
        reply.body
    );
    assert!(reply.body.ends_with("data: [DONE]\n\n"));

    // An explicit `null` (valid OpenAI) is replaced in place, not joined by a second member.
    let null_options = serde_json::json!({"model": "m", "prompt": "hi", "stream": true, "max_tokens": 4, "stream_options": null});
    let reply = client
        .post("/v1/completions", Some("key-a"), &null_options)
        .await;
    assert_eq!(reply.status, 200);
    let sent = replica.state.last_body.lock().expect("body").clone();
    assert_eq!(
        sent.expect("a body")["stream_options"]["include_usage"],
        true
    );
    assert!(
        data_events(&reply.body)
            .iter()
            .all(|e| e.get("usage").is_none())
    );

    let asked = serde_json::json!({"model": "m", "prompt": "hi", "stream": true, "max_tokens": 4, "stream_options": {"include_usage": true}});
    let reply = client.post("/v1/completions", Some("key-a"), &asked).await;
    let events = data_events(&reply.body);
    assert_eq!(
        events.last().expect("events")["usage"]["completion_tokens"],
        4
    );

    let metrics = client.metrics().await;
    assert!(
        metrics.contains("tokenscale_gateway_generation_tokens_total{model_name=\"m\"} 12"),
        "{metrics}"
    );
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_arrive_as_the_replica_sends_them() {
    chunks_arrive_as_sent(false).await;
}

/// Events ended by CRLF (valid SSE; Python's sse-starlette writes them) were held back until
/// the stream's end: the relay looked for `\n\n` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_with_crlf_line_endings_arrive_as_the_replica_sends_them() {
    chunks_arrive_as_sent(true).await;
}

async fn chunks_arrive_as_sent(crlf: bool) {
    let replica = MockReplica::start().await;
    replica.state.token_delay_ms.store(150, Ordering::SeqCst);
    replica.state.crlf.store(crlf, Ordering::SeqCst);
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "prompt": "hi", "stream": true, "max_tokens": 4});
    let started = Instant::now();
    let response = client
        .open(
            "POST",
            "/v1/completions",
            &[
                ("content-type", "application/json"),
                ("authorization", "Bearer key-a"),
            ],
            body.to_string(),
        )
        .await;
    let mut body = response.into_body();
    let mut arrivals = Vec::new();
    let mut text = String::new();
    while let Some(frame) = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("no hang")
    {
        if let Some(data) = frame.expect("frame").data_ref().filter(|d| !d.is_empty()) {
            arrivals.push(started.elapsed());
            text.push_str(std::str::from_utf8(data).expect("utf-8"));
        }
    }
    let events = data_events(&text);
    // Four tokens and the finish chunk; no usage chunk.
    assert_eq!(events.len(), 5, "{text:?}");
    assert!(events.iter().all(|e| e.get("usage").is_none()), "{text:?}");
    let end = if crlf {
        "data: [DONE]\r\n\r\n"
    } else {
        "data: [DONE]\n\n"
    };
    assert!(text.ends_with(end), "line endings kept: {text:?}");
    let metrics = client.metrics().await;
    assert!(
        metrics.contains("tokenscale_gateway_generation_tokens_total{model_name=\"m\"} 4"),
        "usage read: {metrics}"
    );
    // 4 tokens, the finish chunk and [DONE] (the usage chunk is stripped), each after
    // ~150 ms: not buffered.
    assert!(arrivals.len() >= 6, "{arrivals:?}");
    assert!(
        arrivals[0] < Duration::from_millis(450),
        "first chunk late: {arrivals:?}"
    );
    assert!(
        arrivals[arrivals.len() - 1] - arrivals[0] >= Duration::from_millis(400),
        "{arrivals:?}"
    );
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_open_streams_finish() {
    let replica = MockReplica::start().await;
    replica.state.token_delay_ms.store(100, Ordering::SeqCst);
    replica.state.tokens.store(10, Ordering::SeqCst);
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "prompt": "hi", "stream": true, "max_tokens": 10});
    let response = client
        .open(
            "POST",
            "/v1/completions",
            &[
                ("content-type", "application/json"),
                ("authorization", "Bearer key-a"),
            ],
            body.to_string(),
        )
        .await;
    let addr = running.addr;
    let shutdown = tokio::spawn(running.shutdown());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown began"
    );
    let text = read(response).await.body;
    assert_eq!(data_events(&text).len(), 11, "the stream was cut: {text}");
    tokio::time::timeout(Duration::from_secs(5), shutdown)
        .await
        .expect("shutdown ends")
        .expect("joins")
        .expect("ok");
}
