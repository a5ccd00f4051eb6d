//! Killing a replica: retries before the first byte, error events after it, no hang, and
//! the replica gets work again once it is back.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::BodyExt;

use crate::support::*;

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

    // Open 4 streams (spread over both replicas) and read their first chunk.
    let mut streams = Vec::new();
    for i in 0..4 {
        let body = serde_json::json!({"model": "m", "prompt": format!("s{i}"), "max_tokens": 30, "stream": true});
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
        assert_eq!(response.status(), 200);
        let upstream = response.headers()["x-tokenscale-upstream"]
            .to_str()
            .expect("ascii")
            .to_string();
        let mut body = response.into_body();
        let first = body.frame().await.expect("a frame").expect("no error");
        assert!(first.data_ref().is_some_and(|d| d.starts_with(b"data: ")));
        streams.push((upstream, body));
    }
    assert!(
        streams.iter().any(|(u, _)| *u == a.url),
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

    for (upstream, body) in streams {
        let text = tokio::time::timeout(Duration::from_secs(10), body.collect())
            .await
            .expect("stream ends, no hang");
        let text = String::from_utf8_lossy(&text.expect("body").to_bytes()).into_owned();
        if upstream == a.url {
            assert!(
                text.contains("\"error\""),
                "stream from the killed replica must end with an error event: {text}"
            );
        } else {
            assert!(
                text.ends_with("data: [DONE]\n\n") && !text.contains("\"error\""),
                "{text}"
            );
        }
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
    let metrics = client.send("GET", "/metrics", &[], "").await.body;
    assert!(
        metrics.contains("tokenscale_gateway_upstream_errors_total{"),
        "{metrics}"
    );

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
