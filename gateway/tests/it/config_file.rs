//! The config file: errors name the line and the reason; tenants reload on change.

use std::time::Duration;

use tokenscale_gateway::auth::{TenantDirectory, hash_key};
use tokenscale_gateway::config::Config;
use tokenscale_gateway::reload::watch_tenants;

#[test]
fn invalid_files_are_rejected_with_line_and_reason() {
    let key = hash_key("k");
    let cases = [
        (
            "models:\n  - name: m\n    upstream: [\"http://x:1\"]\n",
            "upstream",
        ),
        (
            "models:\n  - name: m\n    upstreams: [\"ftp://x:1\"]\n",
            "line 3",
        ),
        (
            &format!(
                "tenants:\n  - name: a\n    keys: [\"{key}\"]\n    limits: {{requests_per_minute: 0}}\n"
            ),
            "line 2",
        ),
        (
            &format!(
                "tenants:\n  - name: a\n    keys: [\"{key}\"]\n    limits: {{requests_per_minute: -3}}\n"
            ),
            "requests_per_minute",
        ),
        (
            "tenants:\n  - name: a\n    keys: [\"sha256:abc\"]\n",
            "64 hex digits",
        ),
        ("tenants:\n  - name: a\nanonymous: b\n", "line 3"),
        ("queue: {max_len: 0}\n", "queue.max_len"),
        (
            "models:\n  - name: m\n    slo: {tpot_p95_ms: 0}\n",
            "slo.tpot_p95_ms",
        ),
        ("models:\n  - name: m\n    slo: {tpot_ms: 50}\n", "tpot_ms"),
    ];
    for (yaml, expected) in cases {
        let error = Config::from_yaml(yaml).expect_err(yaml).to_string();
        assert!(error.contains(expected), "{yaml}\n→ {error}");
    }
    let unknown = Config::from_yaml("models: []\nlistne: 1\n")
        .expect_err("unknown field")
        .to_string();
    assert!(
        unknown.contains("listne") && unknown.contains('2'),
        "{unknown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_reload_when_the_file_changes_and_bad_edits_are_ignored() {
    let dir = tokenscale_scratch::scratch!("gw-reload");
    let path = dir.join("tenants.yaml");
    let write = |key: &str| {
        std::fs::write(
            &path,
            format!("tenants:\n  - name: a\n    keys: [\"{}\"]\n", hash_key(key)),
        )
        .expect("write");
    };
    write("old");
    let config = Config::load(&path).expect("loads");
    let directory = std::sync::Arc::new(TenantDirectory::new(&config.tenants, None));
    let task = tokio::spawn(watch_tenants(
        path.clone(),
        false,
        Duration::from_millis(20),
        directory.clone(),
    ));
    assert!(directory.authenticate("old").is_some());
    // mtime granularity: make sure the rewrite is seen as a change.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    write("new");
    let mut swapped = false;
    for _ in 0..100 {
        if directory.authenticate("new").is_some() {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(swapped, "new key never loaded");
    assert!(directory.authenticate("old").is_none());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&path, "tenants:\n  - name: a\n    keys: [\"plain-key\"]\n").expect("write");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        directory.authenticate("new").is_some(),
        "an invalid edit must keep the last good tenants"
    );
    task.abort();
}
