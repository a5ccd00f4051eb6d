//! Malformed, huge and mistyped requests get 4xx OpenAI-style errors; the gateway stays up.

use crate::support::*;

/// Name, headers, body, expected status.
type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<u8>,
    u16,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_4xx_and_the_gateway_is_unharmed() {
    let replica = MockReplica::start().await;
    let yaml = config(&[&replica], "{}", "") + "max_body_bytes: 65536\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let json = [
        ("content-type", "application/json"),
        ("authorization", "Bearer key-a"),
    ];
    let cases: Vec<Case> = vec![
        (
            "malformed JSON",
            json.to_vec(),
            b"{\"model\": \"m\", \"prompt\": ".to_vec(),
            400,
        ),
        (
            "invalid UTF-8",
            json.to_vec(),
            b"{\"model\": \"m\", \"prompt\": \"\xff\xfe\"}".to_vec(),
            400,
        ),
        ("not an object", json.to_vec(), b"[1, 2, 3]".to_vec(), 400),
        (
            "no model",
            json.to_vec(),
            br#"{"prompt": "x"}"#.to_vec(),
            400,
        ),
        (
            "wrong type",
            json.to_vec(),
            br#"{"model": "m", "prompt": "x", "max_tokens": "many"}"#.to_vec(),
            400,
        ),
        (
            "negative max_tokens",
            json.to_vec(),
            br#"{"model": "m", "prompt": "x", "max_tokens": -5}"#.to_vec(),
            400,
        ),
        (
            "no prompt",
            json.to_vec(),
            br#"{"model": "m"}"#.to_vec(),
            400,
        ),
        (
            "bad deadline",
            [json.to_vec(), vec![("x-tokenscale-deadline-ms", "soon")]].concat(),
            br#"{"model": "m", "prompt": "x"}"#.to_vec(),
            400,
        ),
        (
            "unknown model",
            json.to_vec(),
            br#"{"model": "gpt-9", "prompt": "x"}"#.to_vec(),
            404,
        ),
        (
            "huge body",
            json.to_vec(),
            format!(r#"{{"model": "m", "prompt": "{}"}}"#, "x".repeat(100_000)).into_bytes(),
            413,
        ),
        (
            "form content type",
            vec![
                ("content-type", "application/x-www-form-urlencoded"),
                ("authorization", "Bearer key-a"),
            ],
            b"model=m".to_vec(),
            415,
        ),
        (
            "no content type",
            vec![("authorization", "Bearer key-a")],
            br#"{"model": "m", "prompt": "x"}"#.to_vec(),
            415,
        ),
    ];
    for (name, headers, body, status) in cases {
        let reply = client.send("POST", "/v1/completions", &headers, body).await;
        assert_eq!(reply.status.as_u16(), status, "{name}: {}", reply.body);
        let error = &reply.json()["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{name}: {}",
            reply.body
        );
        assert!(error["type"].is_string(), "{name}");
    }
    assert_eq!(client.send("GET", "/v1/nothing", &[], "").await.status, 404);
    assert_eq!(
        client.send("GET", "/v1/completions", &[], "").await.status,
        404
    );
    assert_eq!(replica.requests(), 0, "no bad request reached the replica");
    let ok = client
        .post(
            "/v1/completions",
            Some("key-a"),
            &completion_body("fine", 2),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let replica = MockReplica::start().await;
    let yaml = config(&[&replica], "{}", "") + "client_header_timeout_ms: 300\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let mut slow = tokio::net::TcpStream::connect(running.addr)
        .await
        .expect("connect");
    slow.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("partial head");
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "the gateway still held the half-sent request after 10 s"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "closed after {:?}, before the timeout",
        started.elapsed()
    );
    assert_eq!(
        replica.requests(),
        0,
        "a half-sent request reached a replica"
    );
    // Requests that arrive whole are served as before.
    let reply = client
        .post(
            "/v1/completions",
            Some("key-a"),
            &completion_body("hello", 4),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}
