//! Tenant limits: bursts admitted exactly to the bucket, 429 with headers, refill, settlement.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::*;

const LIMITS: &str =
    "{requests_per_minute: 60, input_tokens_per_minute: 6000, output_tokens_per_minute: 2000}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_passes_up_to_the_bucket_then_429s_until_refill() {
    let replica = MockReplica::start().await;
    let (running, client) = gateway(&config(&[&replica], LIMITS, "")).await;
    wait_ready(&running, "m", 1).await;
    let body = completion_body("hi", 1);

    let started = Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..70 {
        statuses.push(client.post("/v1/completions", Some("key-a"), &body).await);
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let admitted = statuses.iter().filter(|r| r.status == 200).count();
    // 60 in the bucket, plus at most what refilled (1 per second) during the burst.
    assert!(
        statuses[..60].iter().all(|r| r.status == 200),
        "the first 60 must pass"
    );
    assert!(
        admitted <= 60 + elapsed_s.ceil() as usize,
        "{admitted} admitted in {elapsed_s:.2}s"
    );
    let refused = statuses.iter().find(|r| r.status == 429).expect("some 429");
    assert_eq!(refused.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(refused.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(refused.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(refused.header("x-ratelimit-limit-tokens"), Some("6000"));
    assert_eq!(
        refused.header("x-ratelimit-limit-output-tokens"),
        Some("2000")
    );
    assert!(
        refused
            .header("x-ratelimit-reset-requests")
            .is_some_and(|v| v.ends_with('s'))
    );
    let retry_after: u64 = refused
        .header("retry-after")
        .expect("retry-after")
        .parse()
        .expect("seconds");
    assert_eq!(retry_after, 1);
    let retry_ms: u64 = refused
        .header("retry-after-ms")
        .expect("retry-after-ms")
        .parse()
        .expect("ms");
    assert!(retry_ms <= 1000, "{retry_ms}");
    assert!(
        replica.requests() as usize == admitted,
        "429s must not reach the replica"
    );

    tokio::time::sleep(Duration::from_millis(retry_ms + 50)).await;
    let again = client.post("/v1/completions", Some("key-a"), &body).await;
    assert_eq!(
        again.status, 200,
        "passes after the refill interval: {}",
        again.body
    );
    let metrics = client.metrics().await;
    assert!(metrics.contains("tokenscale_gateway_rate_limited_total{tenant=\"team-a\",model_name=\"m\",limit=\"requests\"}"), "{metrics}");
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_tokens_are_reserved_while_running_and_refunded_after() {
    let replica = MockReplica::start().await;
    replica.state.delay_ms.store(400, Ordering::SeqCst);
    let (running, client) = gateway(&config(&[&replica], LIMITS, "")).await;
    wait_ready(&running, "m", 1).await;
    let big = completion_body("hi", 1500);

    // While the first request runs, its 1500 reserved output tokens leave 500: the second
    // one (also 1500) is refused on output tokens.
    let first = tokio::spawn({
        let client = client.clone();
        let big = big.clone();
        async move { client.post("/v1/completions", Some("key-a"), &big).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let second = client.post("/v1/completions", Some("key-a"), &big).await;
    assert_eq!(second.status, 429, "{}", second.body);
    assert!(
        second.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("output tokens")
    );
    assert_eq!(first.await.expect("joins").status, 200);
    // The first used 4 tokens: 1496 came back, so another 1500 fits now.
    let third = client.post("/v1/completions", Some("key-a"), &big).await;
    assert_eq!(third.status, 200, "{}", third.body);
    let remaining = third.remaining("output-tokens");
    assert!(
        (496..520).contains(&remaining),
        "remaining output tokens {remaining}"
    );
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_without_usage_is_settled_with_the_gateways_estimate() {
    let replica = MockReplica::start().await;
    // An engine that reports no usage: 24 generated characters, 6 tokens at 4 per token.
    let answer = r#"{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Hello there, how are you"}}],"object":"chat.completion"}"#;
    *replica.state.canned.lock().expect("canned") =
        Some((200, "application/json", answer.to_string()));
    let (running, client) = gateway(&config(&[&replica], LIMITS, "")).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 1500});
    let first = client
        .post("/v1/chat/completions", Some("key-a"), &body)
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    // Settled at 6 of the 1500 reserved: a second 1500 fits in the 2000 (left unsettled, the
    // first would still hold 1500 and the second would be refused).
    let second = client
        .post("/v1/chat/completions", Some("key-a"), &body)
        .await;
    assert_eq!(second.status, 200, "{}", second.body);
    let remaining = second.remaining("output-tokens");
    assert!(
        (494..530).contains(&remaining),
        "remaining output tokens {remaining}"
    );
    assert_eq!(
        metric(&client, "tokenscale_gateway_generation_tokens_total").await,
        "12"
    );
    assert_eq!(series(&client, &usage_source("gateway")).await, "2");
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_tokens_served_from_cache_are_not_charged() {
    let replica = MockReplica::start().await;
    replica.state.cached_tokens.store(800, Ordering::SeqCst);
    let (running, client) = gateway(&config(&[&replica], LIMITS, "")).await;
    wait_ready(&running, "m", 1).await;
    // 4000 characters: estimated (and reported) as 1000 prompt tokens, 800 of them cached.
    let prompt = "abcd".repeat(1000);
    let body = completion_body(&prompt, 1);
    let first = client.post("/v1/completions", Some("key-a"), &body).await;
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("x-ratelimit-remaining-tokens"),
        Some("5000"),
        "the estimate is reserved on arrival"
    );
    let second = client.post("/v1/completions", Some("key-a"), &body).await;
    let remaining = second.remaining("tokens");
    // First settled at 200 uncached tokens, second reserved 1000: 4800 (+ refill of 100/s).
    assert!(
        (4800..4900).contains(&remaining),
        "remaining input tokens {remaining}"
    );
    let metrics = client.metrics().await;
    assert!(
        metrics.contains("tokenscale_gateway_cached_prompt_tokens_total{model_name=\"m\"} 1600"),
        "{metrics}"
    );
    running.shutdown().await.expect("clean shutdown");
}
