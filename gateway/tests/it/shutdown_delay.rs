//! `--shutdown-delay-s` (env `TOKENSCALE_GATEWAY_SHUTDOWN_DELAY_S`) on the real binary: after
//! SIGTERM the gateway answers as usual for the delay (`/health`, and requests through it to
//! its upstream), then drains (a stream in flight finishes) and exits 0.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::processes::GatewayProcess;
use crate::support::{MockReplica, completion_body, config, read};

const KEY: &str = "Bearer key-a";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_on_for_its_shutdown_delay_then_drains_and_exits_0() {
    let replica = MockReplica::start().await;
    let yaml = config(&[&replica], "{}", "");
    let delay = [("TOKENSCALE_GATEWAY_SHUTDOWN_DELAY_S", "3")];
    let mut gateway = GatewayProcess::start_with_env(&yaml, &delay).await;
    let client = gateway.client.clone();
    let before = client
        .post("/v1/completions", Some("key-a"), &completion_body("hi", 4))
        .await;
    assert_eq!(before.status, 200, "{}", before.body);

    gateway.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Within the delay: healthy, and new requests still reach the upstream.
    let health = client.send("GET", "/health", &[], "").await;
    assert_eq!(
        health.status, 200,
        "/health during the delay: {}",
        health.body
    );
    let answered = replica.requests();
    let during = client
        .post("/v1/completions", Some("key-a"), &completion_body("hi", 4))
        .await;
    assert_eq!(during.status, 200, "{}", during.body);
    assert_eq!(
        replica.requests(),
        answered + 1,
        "the request reached the upstream"
    );
    assert_eq!(gateway.exited(), None, "exited within its shutdown delay");

    // A stream started in the delay that outlasts it (40 tokens, 100 ms apart): the drain
    // lets it finish.
    replica.state.tokens.store(40, Ordering::SeqCst);
    replica.state.token_delay_ms.store(100, Ordering::SeqCst);
    let mut body = completion_body("hi", 40);
    body["stream"] = true.into();
    let headers = [("content-type", "application/json"), ("authorization", KEY)];
    let stream = client
        .open("POST", "/v1/completions", &headers, body.to_string())
        .await;
    assert_eq!(stream.status(), 200);
    let text = read(stream).await.body;
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "stream cut short: {text}"
    );
    assert!(
        text.contains("\"tok39 \""),
        "the last token never came: {text}"
    );

    let status = gateway.wait_exit(Duration::from_secs(30)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exit status {status:?}"
    );
}
