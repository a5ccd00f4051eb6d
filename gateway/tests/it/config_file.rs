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

#[test]
fn bad_adapters_are_refused_at_their_line() {
    let models = "models:\n  - name: base\n    adapters:\n      - sql\n";
    let cases = [
        (
            format!("{models}      - \"\"\n"),
            "line 5: adapter name is empty",
        ),
        (
            format!("{models}      - sql\n"),
            "line 5: adapter `sql` listed twice",
        ),
        (
            format!("{models}  - name: other\n    adapters: [sql]\n"),
            "line 6: adapter `sql` listed twice",
        ),
        (
            format!("{models}      - other\n  - name: other\n"),
            "line 5: adapter `other` has the name of a model",
        ),
        (
            format!("{models}routes:\n  - name: sql\n    targets: [{{model: base}}]\n"),
            "line 6: route `sql` has the name of an adapter",
        ),
        (
            "models:\n  - name: k\n    discovery: kubernetes\n    adapters: [sql]\n".into(),
            "line 4: a model with `discovery: kubernetes` takes its adapters",
        ),
        (format!("{models}      - {{name: sql}}\n"), "line 5"),
    ];
    for (yaml, expected) in cases {
        let error = Config::from_yaml(&yaml).expect_err(&yaml).to_string();
        assert!(error.contains(expected), "{yaml}\n→ {error}");
    }
    let config = Config::from_yaml(models).expect("adapters load");
    assert_eq!(config.models[0].adapters[0].value, "sql");
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
