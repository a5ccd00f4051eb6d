//! Routes over mock replicas: a route's request moves to its next model when the first has no
//! capacity within the request's share of its deadline, or when its replicas fail; the next
//! model gets the body under its own name, and the metrics say why it moved.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::*;

/// Models `first` (over `first_upstreams`) and `second`, and the route `chat` over them.
fn routed(first_upstreams: &[&MockReplica], second: &MockReplica) -> String {
    let urls: Vec<String> = first_upstreams
        .iter()
        .map(|u| format!("\"{}\"", u.url))
        .collect();
    format!(
        "models:\n  - name: first\n    upstreams: [{}]\n  - name: second\n    upstreams: [\"{}\"]\n\
         routes:\n  - name: chat\n    targets: [{{model: first}}]\n    fallback: [second]\n\
         tenants:\n  - name: team-a\n    keys: [\"{}\"]\n\
         upstream: {{max_attempts: 2}}\n\
         health: {{interval_ms: 50, stale_after_ms: 1000, timeout_ms: 500}}\n",
        urls.join(", "),
        second.url,
        tokenscale_gateway::auth::hash_key("key-a"),
    )
}

fn chat_body() -> serde_json::Value {
    serde_json::json!({"model": "chat", "prompt": "hello", "max_tokens": 2})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_capacity_within_its_share_of_the_deadline_moves_to_the_next_model() {
    let second = MockReplica::start().await;
    // `first` has no replica: its requests queue (as a model scaled to zero does).
    let (running, client) = gateway(&routed(&[], &second)).await;
    wait_ready(&running, "second", 1).await;
    let started = Instant::now();
    let reply = client
        .send(
            "POST",
            "/v1/completions",
            &[
                ("content-type", "application/json"),
                ("authorization", "Bearer key-a"),
                ("x-tokenscale-deadline-ms", "2000"),
            ],
            chat_body().to_string(),
        )
        .await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-tokenscale-model"), Some("second"));
    // The first model had half the deadline; the second served at once after it.
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    let sent = second.state.last_body.lock().expect("body").clone();
    assert_eq!(
        sent.expect("a body")["model"],
        "second",
        "sent under the model's own name"
    );
    let fallbacks = client.metrics().await;
    assert!(
        fallbacks
            .contains("{route=\"chat\",from=\"first\",to=\"second\",reason=\"no_capacity\"} 1"),
        "{fallbacks}"
    );
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_replicas_move_the_request_to_the_next_model_after_their_retries() {
    let (broken, second) = (MockReplica::start().await, MockReplica::start().await);
    *broken.state.canned.lock().expect("canned") = Some((
        503,
        "application/json",
        r#"{"error": {"message": "engine overloaded"}}"#.into(),
    ));
    let (running, client) = gateway(&routed(&[&broken], &second)).await;
    wait_ready(&running, "first", 1).await;
    wait_ready(&running, "second", 1).await;
    let reply = client
        .post("/v1/completions", Some("key-a"), &chat_body())
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-tokenscale-model"), Some("second"));
    assert!(broken.state.requests.load(Ordering::SeqCst) >= 1);
    let fallbacks = client.metrics().await;
    assert!(
        fallbacks.contains("{route=\"chat\",from=\"first\",to=\"second\",reason=\"upstream\"} 1"),
        "{fallbacks}"
    );
    // A model asked for by its own name answers as it is: no route, no fallback.
    let direct = serde_json::json!({"model": "first", "prompt": "hello", "max_tokens": 2});
    let reply = client.post("/v1/completions", Some("key-a"), &direct).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    running.shutdown().await.expect("clean shutdown");
}
