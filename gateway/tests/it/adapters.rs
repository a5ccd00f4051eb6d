//! LoRA adapters through the real gateway and fake engines that report
//! `vllm:lora_requests_info`: a request naming an adapter goes to its parent model's replica
//! holding it until that one is over the load bound; an adapter nobody holds has one stable
//! home; `/v1/models` lists adapters with their parent, read by the official `openai` client.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokenscale_gateway::RunningGateway;
use tokenscale_gateway::auth::hash_key;

use crate::support::{MockReplica, TestClient, gateway, series, wait_ready};

/// `base` over `replicas`, serving adapters `sql` and `legal`; tenant `a` (key `key-a`) may
/// use `base`, tenant `b` (key `key-b`) only `sql`.
fn config(replicas: &[&MockReplica]) -> String {
    let urls: Vec<String> = replicas.iter().map(|r| format!("\"{}\"", r.url)).collect();
    format!(
        "models:\n  - name: base\n    upstreams: [{}]\n    replica_concurrency: 8\n    adapters: [sql, legal]\n\
         tenants:\n  - name: a\n    keys: [\"{}\"]\n    models: [base]\n  - name: b\n    keys: [\"{}\"]\n    models: [sql]\n\
         health: {{interval_ms: 50, stale_after_ms: 1000, timeout_ms: 500}}\n",
        urls.join(", "),
        hash_key("key-a"),
        hash_key("key-b"),
    )
}

fn lora_info(running: &str) -> String {
    format!(
        "vllm:lora_requests_info{{max_lora=\"4\",running_lora_adapters=\"{running}\",waiting_lora_adapters=\"\"}} 1.7e9\n"
    )
}

/// Waits (bounded) until the gateway has scraped that the replica at `url` holds `adapter`.
async fn wait_held(running: &RunningGateway, url: &str, adapter: &str) {
    for _ in 0..200 {
        let pool = running.registry.router().model("base").expect("base");
        let replicas = pool.snapshot().replicas;
        if replicas
            .iter()
            .any(|r| r.addr.url == url && r.holds_adapter(adapter))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{url} never seen holding {adapter}");
}

/// Requests `model` answered by each replica (by the body's `model`), in `replicas` order.
fn served(replicas: &[&MockReplica], model: &str) -> Vec<usize> {
    replicas
        .iter()
        .map(|r| {
            let bodies = r.state.bodies.lock().expect("bodies");
            bodies.iter().filter(|b| b["model"] == model).count()
        })
        .collect()
}

async fn complete(client: &TestClient, key: &str, model: &str) -> u16 {
    let body = serde_json::json!({"model": model, "prompt": "hello", "max_tokens": 4});
    client
        .post("/v1/completions", Some(key), &body)
        .await
        .status
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adapter_requests_go_to_the_replica_holding_it_until_it_is_over_the_bound() {
    let (a, b, c) = (
        MockReplica::start().await,
        MockReplica::start().await,
        MockReplica::start().await,
    );
    *b.state.extra_metrics.lock().expect("metrics") = lora_info("sql");
    let replicas = [&a, &b, &c];
    let (running, client) = gateway(&config(&replicas)).await;
    wait_ready(&running, "base", 3).await;
    wait_held(&running, &b.url, "sql").await;
    // One at a time: every request for `sql` goes to the replica that holds it, with the
    // adapter's name (the engine picks its adapter by it).
    for _ in 0..6 {
        assert_eq!(complete(&client, "key-a", "sql").await, 200);
    }
    assert_eq!(served(&replicas, "sql"), [0, 6, 0]);
    // Twelve at once on slow replicas: the holder takes requests while it is under
    // ceil(1.25 × (in flight + 1) / 3), at most 5 with 11 others in flight; the rest spill.
    for r in replicas {
        r.state.delay_ms.store(1000, Ordering::SeqCst);
    }
    let burst = (0..12).map(|_| complete(&client, "key-a", "sql"));
    let statuses = futures::future::join_all(burst).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let after = served(&replicas, "sql");
    let peak = b.state.peak_in_flight.load(Ordering::SeqCst);
    assert!(
        (2..=5).contains(&peak),
        "holder peak {peak}, served {after:?}"
    );
    assert!(after[1] - 6 >= 2, "the holder took its share: {after:?}");
    assert!(
        after[0] + after[2] >= 1,
        "over the bound it spilled: {after:?}"
    );
    // `legal` is held nowhere: every request goes to its one home.
    for r in replicas {
        r.state.delay_ms.store(0, Ordering::SeqCst);
    }
    for _ in 0..5 {
        assert_eq!(complete(&client, "key-a", "legal").await, 200);
    }
    let legal = served(&replicas, "legal");
    assert_eq!(legal.iter().filter(|n| **n == 5).count(), 1, "{legal:?}");
    let hits = |affinity: &str| {
        format!(
            "tokenscale_gateway_adapter_requests_total{{model_name=\"base\",affinity=\"{affinity}\"}}"
        )
    };
    let (hit, miss) = (
        series(&client, &hits("hit")).await,
        series(&client, &hits("miss")).await,
    );
    let (hit, miss): (u64, u64) = (hit.parse().expect("hits"), miss.parse().expect("misses"));
    // 23 adapter requests; misses: `legal`'s first, and the first spilled `sql` request on
    // each other replica (it holds `sql` from then on).
    assert_eq!(hit + miss, 23, "hit {hit} miss {miss}");
    assert!((2..=3).contains(&miss), "hit {hit} miss {miss}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_list_adapters_with_their_parent_and_access_covers_them() {
    let replica = MockReplica::start().await;
    let (running, client) = gateway(&config(&[&replica])).await;
    wait_ready(&running, "base", 1).await;
    // Tenant `b` may use `sql` by name: not `base`, nor its other adapter.
    assert_eq!(complete(&client, "key-b", "sql").await, 200);
    assert_eq!(complete(&client, "key-b", "legal").await, 404);
    assert_eq!(complete(&client, "key-b", "base").await, 404);
    // Tenant `a` may use `base`, so its adapters too.
    assert_eq!(complete(&client, "key-a", "legal").await, 200);
    let listed = |key: &'static str| {
        let client = &client;
        async move {
            let auth = format!("Bearer {key}");
            let reply = client
                .send("GET", "/v1/models", &[("authorization", &auth)], "")
                .await;
            let data = reply.json()["data"].as_array().cloned().unwrap_or_default();
            data.iter()
                .map(|m| format!("{} {} {}", m["id"], m["parent"], m["root"]))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listed("key-a").await,
        [
            "\"base\" null null",
            "\"sql\" \"base\" \"base\"",
            "\"legal\" \"base\" \"base\""
        ]
    );
    assert_eq!(listed("key-b").await, ["\"sql\" \"base\" \"base\""]);
    let Some(lines) = openai_models_list(running.addr, "key-a") else {
        return;
    };
    let parents: Vec<String> = lines
        .iter()
        .map(|l| format!("{} {} {}", l["id"], l["parent"], l["root"]))
        .collect();
    assert_eq!(
        parents,
        [
            "\"base\" null null",
            "\"sql\" \"base\" \"base\"",
            "\"legal\" \"base\" \"base\""
        ]
    );
}

/// `client.models.list()` of the official `openai` client against the gateway at `addr`, as
/// `scripts/gateway_models_check.py` prints it; `None` (said as NOT RUN) without `python3`
/// and the `openai` package (`scripts/setup` installs it).
fn openai_models_list(addr: std::net::SocketAddr, key: &str) -> Option<Vec<serde_json::Value>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let site = root.join(".cache/tools/python");
    let output = std::process::Command::new("python3")
        .arg(root.join("scripts/gateway_models_check.py"))
        .arg(format!("http://{addr}/v1"))
        .arg(key)
        .env("PYTHONPATH", &site)
        .output();
    let output = match output {
        Ok(output) => output,
        Err(error) => {
            eprintln!("NOT RUN: python3 does not start: {error}");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("No module named 'openai'") {
        eprintln!(
            "NOT RUN: the openai package is not under {}",
            site.display()
        );
        return None;
    }
    assert!(output.status.success(), "gateway_models_check.py: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"));
    Some(lines.collect())
}
