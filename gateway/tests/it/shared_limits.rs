//! Two gateway processes sharing limits and capacity through a real Redis (Debian's
//! `redis-server`, started here on a free loopback port): a tenant's quota is one quota
//! across pods, the headers agree, Redis killed gives the documented per-pod fallback (1/N of
//! each quota) without hanging, and Redis restarted resumes shared limiting.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::processes::{GatewayProcess, Redis};
use crate::support::*;

const RPM: u64 = 60;

fn shared_config(replica: &MockReplica, redis: &Redis, concurrency: u32) -> String {
    format!(
        "models:\n  - name: m\n    upstreams: [\"{}\"]\n    replica_concurrency: {concurrency}\n\
         tenants:\n  - name: team-a\n    keys: [\"{}\"]\n    models: [m]\n    \
         limits: {{requests_per_minute: {RPM}, input_tokens_per_minute: 100000, output_tokens_per_minute: 100000}}\n\
         limits: {{store: redis, redis_url: \"{}\", timeout_ms: 250}}\n\
         health: {{interval_ms: 50, stale_after_ms: 1000, timeout_ms: 500}}\n",
        replica.url,
        tokenscale_gateway::auth::hash_key("key-a"),
        redis.url(),
    )
}

/// Two gateway processes on `yaml`, once each sees the other and the replica is ready.
async fn two_pods(yaml: &str) -> (GatewayProcess, GatewayProcess) {
    let (a, b) = (
        GatewayProcess::start(yaml).await,
        GatewayProcess::start(yaml).await,
    );
    for pod in [&a, &b] {
        pod.wait_metric("tokenscale_gateway_pods", 2.0).await;
        pod.wait_metric(
            "tokenscale_gateway_replicas{model_name=\"m\",state=\"ready\"}",
            1.0,
        )
        .await;
    }
    (a, b)
}

/// Sends `count` requests alternating between `pods`, 8 at a time; returns the replies in
/// order and how long it took.
async fn alternate(pods: &[&GatewayProcess], count: usize) -> (Vec<Reply>, f64) {
    let started = Instant::now();
    let replies = futures::stream::iter(0..count)
        .map(|i| {
            let client = pods[i % pods.len()].client.clone();
            async move {
                client
                    .post("/v1/completions", Some("key-a"), &completion_body("hi", 10))
                    .await
            }
        })
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
    (replies, started.elapsed().as_secs_f64())
}

fn admitted(replies: &[Reply]) -> usize {
    replies.iter().filter(|r| r.status == 200).count()
}

/// Admitted within `expected ± 2`, plus what refilled at RPM/60 per second while it ran.
fn assert_about(admitted: usize, expected: f64, elapsed_s: f64, what: &str) {
    let refill = elapsed_s * expected / 60.0;
    assert!(
        admitted as f64 >= expected - 2.0 && admitted as f64 <= expected + 2.0 + refill,
        "{what}: {admitted} admitted, expected {expected} ± 2 (+{refill:.1} refilled in {elapsed_s:.1} s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_one_quota_through_redis_and_survive_its_loss() {
    let replica = MockReplica::start().await;
    let mut redis = Redis::start(None).await;
    let (a, b) = two_pods(&shared_config(&replica, &redis, 64)).await;

    // The headers agree between pods: the second pod sees the first one's take.
    let first = a
        .client
        .post("/v1/completions", Some("key-a"), &completion_body("hi", 10))
        .await;
    let second = b
        .client
        .post("/v1/completions", Some("key-a"), &completion_body("hi", 10))
        .await;
    let remaining = |r: &Reply| -> i64 {
        r.header("x-ratelimit-remaining-requests")
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1)
    };
    assert_eq!(first.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(second.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(remaining(&first), 59);
    assert!(
        (58..=59).contains(&remaining(&second)),
        "pod b saw {} left after pod a's 59",
        remaining(&second)
    );

    // 300 requests alternated: one quota of 60 (the 2 above included), not 60 per pod.
    let (replies, elapsed_s) = alternate(&[&a, &b], 300).await;
    let total = admitted(&replies) + 2;
    assert_about(total, RPM as f64, elapsed_s, "shared quota");
    let refused = replies.iter().find(|r| r.status == 429).expect("some 429");
    assert_eq!(refused.header("x-ratelimit-limit-requests"), Some("60"));
    // The token totals the pods counted are what the engine reported (4 tokens a request).
    assert_eq!(replica.requests() as usize, total);
    let mut generated = 0.0;
    for pod in [&a, &b] {
        generated += pod
            .metric("tokenscale_gateway_tenant_generation_tokens_total{tenant=\"team-a\",model_name=\"m\"}")
            .await
            .unwrap_or(0.0);
    }
    assert_eq!(generated, 4.0 * total as f64);

    // Redis killed: each pod limits alone at 1/2 of the quota (30 each), and nothing hangs.
    redis.kill();
    let started = Instant::now();
    let (replies, elapsed_s) = alternate(&[&a, &b], 100).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "requests hung while Redis was down"
    );
    assert!(
        replies.iter().all(|r| r.status == 200 || r.status == 429),
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_about(
        admitted(&replies),
        RPM as f64,
        elapsed_s,
        "fallback (30 per pod)",
    );
    let local = replies.iter().find(|r| r.status == 200).expect("some 200");
    assert_eq!(local.header("x-ratelimit-limit-requests"), Some("30"));
    for pod in [&a, &b] {
        assert_eq!(
            pod.metric("tokenscale_gateway_limits_store_up").await,
            Some(0.0)
        );
        assert!(
            pod.metric("tokenscale_gateway_limits_local_fallback_total")
                .await
                .unwrap_or(0.0)
                >= 1.0
        );
    }

    // Redis back on its port (empty: its buckets start full): shared limiting resumes.
    let redis = Redis::start(Some(redis.port)).await;
    let started = Instant::now();
    let mut probes = 0;
    'wait: loop {
        for pod in [&a, &b] {
            let reply = pod
                .client
                .post("/v1/completions", Some("key-a"), &completion_body("hi", 10))
                .await;
            probes += usize::from(reply.status == 200);
            if reply.header("x-ratelimit-limit-requests") == Some("60") && probes >= 2 {
                break 'wait;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "shared limiting did not resume within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (replies, elapsed_s) = alternate(&[&a, &b], 300).await;
    // The probes that went to Redis count against its fresh bucket; local ones did not.
    let resumed = admitted(&replies);
    assert!(
        (resumed as f64) <= RPM as f64 + 2.0 + elapsed_s,
        "{resumed} admitted after Redis came back: limits are not shared again"
    );
    assert!(
        resumed as f64 >= RPM as f64 - probes as f64 - 2.0,
        "{resumed} admitted"
    );
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_split_a_replicas_concurrency() {
    let replica = MockReplica::start().await;
    replica.state.delay_ms.store(300, Ordering::SeqCst);
    let redis = Redis::start(None).await;
    // 4 slots on the one replica: 2 for each pod.
    let (a, b) = two_pods(&shared_config(&replica, &redis, 4)).await;
    // 12 requests at once, 6 through each pod: the replica never sees more than its 4.
    let replies: Vec<Reply> = futures::stream::iter(0..12)
        .map(|i| {
            let client = [&a, &b][i % 2].client.clone();
            async move {
                client
                    .post("/v1/completions", Some("key-a"), &completion_body("x", 2))
                    .await
            }
        })
        .buffer_unordered(12)
        .collect()
        .await;
    assert!(
        replies.iter().all(|r| r.status == 200),
        "all served in turn"
    );
    let peak = replica.state.peak_in_flight.load(Ordering::SeqCst);
    assert!(
        (3..=4).contains(&peak),
        "the replica saw {peak} requests at once; it was sized for 4"
    );
    drop(redis);
}
