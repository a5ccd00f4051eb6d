//! `GET /v1/usage`: a tenant's key reads its own rows only, the admin listener every tenant's;
//! each window's use beside its limit, cached tokens apart, 429s by limit, the binding limit.

use std::sync::atomic::Ordering;

use crate::support::*;

/// Two tenants on model `m`: team-a with 3 requests a minute, team-b with roomy limits.
fn two_tenants(replica: &MockReplica) -> String {
    let hash = tokenscale_gateway::auth::hash_key;
    format!(
        "models:\n  - name: m\n    upstreams: [\"{}\"]\n\
         tenants:\n  - name: team-a\n    keys: [\"{}\"]\n    limits: {{requests_per_minute: 3, input_tokens_per_minute: 100000, output_tokens_per_minute: 100000}}\n\
         \x20 - name: team-b\n    keys: [\"{}\"]\n    limits: {{requests_per_minute: 100}}\n\
         health: {{interval_ms: 50, stale_after_ms: 1000, timeout_ms: 500}}\n",
        replica.url,
        hash("key-a"),
        hash("key-b"),
    )
}

/// The report `client` gets for `GET /v1/usage` with `key`.
async fn usage(client: &TestClient, key: Option<&str>) -> (u16, serde_json::Value) {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    let reply = client.send("GET", "/v1/usage", &headers, "").await;
    let json = serde_json::from_str(&reply.body).unwrap_or(serde_json::Value::Null);
    (reply.status.as_u16(), json)
}

fn tenants(report: &serde_json::Value) -> Vec<&str> {
    report["data"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r["tenant"].as_str()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reads_its_own_usage_and_the_admin_port_reads_everyones() {
    let replica = MockReplica::start().await;
    replica.state.cached_tokens.store(10, Ordering::SeqCst);
    let (running, client) = gateway(&two_tenants(&replica)).await;
    wait_ready(&running, "m", 1).await;
    // 400 characters: the mock reports 100 prompt tokens, 10 of them cached, 4 completion.
    let body = completion_body(&"x".repeat(400), 4);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(
            client
                .post("/v1/completions", Some("key-a"), &body)
                .await
                .status,
        );
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    let b = client.post("/v1/completions", Some("key-b"), &body).await;
    assert_eq!(b.status, 200, "{}", b.body);

    let (status, own) = usage(&client, Some("key-a")).await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(tenants(&own), ["team-a"], "{own}");
    let row = &own["data"][0];
    assert_eq!(row["model"], "m");
    let minute = &row["minute"];
    assert_eq!(minute["requests"]["used"], 3);
    assert_eq!(minute["requests"]["limit"], 3);
    assert_eq!(minute["requests"]["percent"], 100.0);
    assert_eq!(minute["input_tokens"]["used"], 270, "uncached only: {row}");
    assert_eq!(minute["cached_input_tokens"], 30);
    assert_eq!(minute["output_tokens"]["used"], 12);
    assert_eq!(minute["rate_limited"]["requests"], 1);
    assert_eq!(row["hour"]["requests"]["limit"], 180);
    assert_eq!(row["binding"], "requests", "{row}");

    let (_, theirs) = usage(&client, Some("key-b")).await;
    assert_eq!(tenants(&theirs), ["team-b"], "{theirs}");
    // team-b has no input or output limits: only requests can bind, at 1 of 100.
    assert_eq!(
        theirs["data"][0]["minute"]["output_tokens"]["limit"],
        serde_json::Value::Null
    );
    assert_eq!(theirs["data"][0]["binding"], "requests");
    let (status, _) = usage(&client, None).await;
    assert_eq!(status, 401, "no key, no usage");

    let admin = TestClient::new(running.admin_addr);
    let (status, all) = usage(&admin, None).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(tenants(&all), ["team-a", "team-b"], "{all}");
    running.shutdown().await.expect("clean shutdown");
}
