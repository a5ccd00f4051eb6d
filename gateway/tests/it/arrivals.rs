//! Arrivals: demand as offered. Every request that passes its tenant's limits is counted on
//! arrival, whether admitted, queued or refused for want of capacity; a 429 is not.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::*;

fn arrivals(outcome: &str) -> String {
    format!("tokenscale_gateway_arrivals_total{{model_name=\"m\",outcome=\"{outcome}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_queued_and_capacity_refused_requests_arrive_rate_limited_ones_do_not() {
    let replica = MockReplica::start().await;
    replica.state.delay_ms.store(400, Ordering::SeqCst);
    // One slot, one queue place, three requests a minute for the tenant.
    let yaml = config(
        &[&replica],
        "{requests_per_minute: 3}",
        "queue: {max_len: 1}\n",
    )
    .replace("replica_concurrency: 8", "replica_concurrency: 1");
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    // "hello": 5 characters = 2 estimated prompt tokens; 4 output tokens reserved.
    let body = completion_body("hello", 4);
    let send = || {
        let (client, body) = (client.clone(), body.clone());
        tokio::spawn(async move { client.post("/v1/completions", Some("key-a"), &body).await })
    };
    let admitted = send();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = send();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let full = client.post("/v1/completions", Some("key-a"), &body).await;
    assert_eq!(full.status, 503, "queue full: {}", full.body);
    let limited = client.post("/v1/completions", Some("key-a"), &body).await;
    assert_eq!(limited.status, 429, "fourth in a minute: {}", limited.body);
    assert_eq!(admitted.await.expect("joins").status, 200);
    assert_eq!(queued.await.expect("joins").status, 200);

    assert_eq!(series(&client, &arrivals("admitted")).await, "1");
    assert_eq!(series(&client, &arrivals("queued")).await, "1");
    assert_eq!(series(&client, &arrivals("refused")).await, "1");
    assert_eq!(
        metric(&client, "tokenscale_gateway_arrival_prompt_tokens_total").await,
        "6"
    );
    assert_eq!(
        metric(&client, "tokenscale_gateway_arrival_output_tokens_total").await,
        "12"
    );
    // The 429 is counted where tenant refusals are, not as demand.
    assert_eq!(
        series(
            &client,
            "tokenscale_gateway_rate_limited_total{tenant=\"team-a\",model_name=\"m\",limit=\"requests\"}"
        )
        .await,
        "1"
    );
    running.shutdown().await.expect("clean shutdown");
}
