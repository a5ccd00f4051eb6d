//! The picker on real replicas: busy or slow replicas are avoided; shared prefixes stick.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reporting_a_queue_gets_no_new_work() {
    let (a, b) = (MockReplica::start().await, MockReplica::start().await);
    // `a`'s engine reports 20 waiting requests on /metrics (kept busy by someone else).
    a.state.waiting.store(20, Ordering::SeqCst);
    let (running, client) =
        gateway(&config(&[&a, &b], "{}", "    affinity_prefix_chars: 0\n")).await;
    wait_ready(&running, "m", 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // a few scrapes
    for i in 0..10 {
        let reply = client
            .post(
                "/v1/completions",
                Some("key-a"),
                &completion_body(&format!("q{i}"), 2),
            )
            .await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.upstream(),
            b.url,
            "request {i} went to the busy replica"
        );
    }
    assert_eq!(a.requests(), 0);
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_replica_gets_less_work_than_a_fast_one() {
    let (slow, fast) = (MockReplica::start().await, MockReplica::start().await);
    slow.state.delay_ms.store(300, Ordering::SeqCst);
    let (running, client) = gateway(&config(
        &[&slow, &fast],
        "{}",
        "    affinity_prefix_chars: 0\n",
    ))
    .await;
    wait_ready(&running, "m", 2).await;
    // Four clients in closed loops, 10 requests each.
    let mut workers = Vec::new();
    for w in 0..4 {
        let client = client.clone();
        workers.push(tokio::spawn(async move {
            let mut hits: HashMap<String, u32> = HashMap::new();
            for i in 0..10 {
                let reply = client
                    .post(
                        "/v1/completions",
                        Some("key-a"),
                        &completion_body(&format!("w{w} q{i}"), 2),
                    )
                    .await;
                assert_eq!(reply.status, 200);
                *hits.entry(reply.upstream()).or_default() += 1;
            }
            hits
        }));
    }
    let mut total: HashMap<String, u32> = HashMap::new();
    for worker in workers {
        for (url, n) in worker.await.expect("worker") {
            *total.entry(url).or_default() += n;
        }
    }
    let (to_slow, to_fast) = (
        total.get(&slow.url).copied().unwrap_or(0),
        total.get(&fast.url).copied().unwrap_or(0),
    );
    assert_eq!(to_slow + to_fast, 40);
    assert!(to_fast >= 3 * to_slow, "fast {to_fast} vs slow {to_slow}");
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_prefix_requests_stick_to_one_replica_and_others_spread() {
    let (a, b) = (MockReplica::start().await, MockReplica::start().await);
    let (running, client) =
        gateway(&config(&[&a, &b], "{}", "    affinity_prefix_chars: 64\n")).await;
    wait_ready(&running, "m", 2).await;
    tokio::time::sleep(Duration::from_millis(150)).await; // fresh scrapes on both
    let system = "You are a careful assistant. Answer in one short sentence, please. ";
    let mut homes = Vec::new();
    for i in 0..8 {
        let reply = client
            .post(
                "/v1/completions",
                Some("key-a"),
                &completion_body(&format!("{system}Question {i}?"), 2),
            )
            .await;
        assert_eq!(reply.status, 200);
        homes.push(reply.upstream());
    }
    assert!(
        homes.iter().all(|h| *h == homes[0]),
        "shared prefix moved between replicas: {homes:?}"
    );
    let mut seen = std::collections::HashSet::new();
    for i in 0..24 {
        let prompt =
            format!("{i} distinct prompt number {i} with its own beginning, long enough to hash");
        seen.insert(
            client
                .post(
                    "/v1/completions",
                    Some("key-a"),
                    &completion_body(&prompt, 2),
                )
                .await
                .upstream(),
        );
    }
    assert_eq!(seen.len(), 2, "different prefixes should use both replicas");
    running.shutdown().await.expect("clean shutdown");
}
