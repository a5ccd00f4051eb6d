//! The Grafana dashboard: one row per model with every panel the issue asks for, each query
//! valid PromQL (promtool) over metric names defined in `common/src/metrics.rs`.

use std::collections::BTreeSet;

use serde_json::Value;
use tokenscale_common::metrics::{LABEL_MODEL_NAME, gateway};
use tokenscale_e2e::tools::{promtool, run, workspace_root};

use crate::{default_render, scratch_dir};

/// The dashboard as shipped in the rendered ConfigMap.
fn dashboard() -> Value {
    let config_map = default_render().get("ConfigMap", "tokenscale-dashboard");
    let json = config_map.value["data"]["tokenscale.json"]
        .as_str()
        .unwrap_or_default();
    serde_json::from_str(json).unwrap_or_else(|e| panic!("dashboard JSON: {e}"))
}

/// Every (panel title, legend, expr) of the dashboard.
fn queries(dashboard: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
            out.push((
                field(&panel["title"]),
                field(&target["legendFormat"]),
                field(&target["expr"]),
            ));
        }
    }
    out
}

/// Metric names a PromQL expression selects (identifiers followed by `{`), histogram
/// `_bucket` suffixes removed.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes: Vec<char> = expr.chars().collect();
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut i = 0;
    while i < bytes.len() {
        if is_name(bytes[i]) && (i == 0 || !is_name(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && is_name(bytes[i]) {
                i += 1;
            }
            if bytes.get(i) == Some(&'{') {
                let name: String = bytes[start..i].iter().collect();
                names.push(
                    name.strip_suffix("_bucket")
                        .map(str::to_owned)
                        .unwrap_or(name),
                );
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Every quoted string in common/src/metrics.rs: the metric names defined once, in code.
fn defined_names() -> BTreeSet<String> {
    let path = workspace_root().join("common/src/metrics.rs");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_panel_is_there_once_per_model() {
    let dashboard = dashboard();
    let row = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["type"] == "row");
    assert_eq!(
        row.map(|r| &r["repeat"]),
        Some(&Value::from("model")),
        "panels repeat per model"
    );
    let variable = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "model");
    let query = variable
        .map(|v| v["definition"].as_str().unwrap_or_default())
        .unwrap_or_default();
    assert!(
        query.contains(LABEL_MODEL_NAME) && query.contains(gateway::REQUESTS_TOTAL),
        "model variable: {query:?}"
    );
    let queries = queries(&dashboard);
    let uses = |title: &str, metric: &str| {
        queries.iter().any(|(t, _, e)| {
            t == title && e.contains(metric) && e.contains("model_name=\"$model\"")
        })
    };
    let required = [
        ("Output tokens/s", gateway::GENERATION_TOKENS_TOTAL),
        ("Output tokens/s per GPU", gateway::GENERATION_TOKENS_TOTAL),
        (
            "p95 time to first token vs SLO",
            gateway::TIME_TO_FIRST_TOKEN_SECONDS,
        ),
        (
            "p95 time per output token vs SLO",
            gateway::TIME_PER_OUTPUT_TOKEN_SECONDS,
        ),
        ("Replicas: desired / ready", "replicas"),
        ("Queue depth", gateway::QUEUE_DEPTH),
        ("KV-cache use", gateway::REPLICA_KV_CACHE_USAGE),
        ("429s by tenant", gateway::RATE_LIMITED_TOTAL),
    ];
    for (title, metric) in required {
        assert!(
            uses(title, metric),
            "no panel {title:?} querying {metric} for $model"
        );
    }
    for title in [
        "p95 time to first token vs SLO",
        "p95 time per output token vs SLO",
    ] {
        assert!(
            queries
                .iter()
                .any(|(t, _, e)| t == title && e.starts_with("histogram_quantile(0.95"))
        );
        assert!(
            queries
                .iter()
                .any(|(t, legend, _)| t == title && legend == "SLO"),
            "{title}: no SLO line"
        );
    }
    assert!(
        queries
            .iter()
            .any(|(t, _, e)| t == "429s by tenant" && e.contains("by (tenant"))
    );
}

#[test]
fn every_query_uses_defined_metrics_and_is_valid_promql() {
    let defined = defined_names();
    let queries = queries(&dashboard());
    let mut undefined = BTreeSet::new();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (title, _, expr)) in queries.iter().enumerate() {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{title}: {expr} selects no metric");
        undefined.extend(names.into_iter().filter(|n| !defined.contains(n)));
        // Grafana's variables, as Grafana would substitute them.
        let promql = expr
            .replace("$__rate_interval", "1m")
            .replace("$model", "m");
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {}\n",
            serde_json::to_string(&promql).unwrap_or_default()
        ));
    }
    assert!(
        undefined.is_empty(),
        "the dashboard uses metrics common/src/metrics.rs does not define: {undefined:?}"
    );
    let dir = scratch_dir("dashboard");
    let file = dir.join("queries.rules.yaml");
    std::fs::write(&file, &rules).unwrap_or_else(|e| panic!("{e}"));
    let mut check = promtool().unwrap_or_else(|e| panic!("{e}"));
    check.args(["check", "rules"]).arg(&file);
    run(check).unwrap_or_else(|e| panic!("promtool: {e}\n{rules}"));
}

#[test]
fn metric_names_are_read_from_selectors() {
    let expr = "histogram_quantile(0.95, sum by (le) (rate(a_b_bucket{x=\"1\"}[1m]))) / max(vllm:kv{y=\"2\"})";
    assert_eq!(metric_names(expr), ["a_b", "vllm:kv"]);
}
