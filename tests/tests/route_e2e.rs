//! Routes (issue 37): one served name over two models whose tenant limits are separate. A real
//! gateway process over two simulated engines (each serving its own model name): a tenant
//! over its limit on the first model is served by the second (the answer and its header name
//! it, the metrics count the fallback); with both spent it gets 429 with the earlier
//! `retry-after`; a tenant that may not use the second model is never sent there; and a
//! weighted route spreads 1,000 requests within 5% of its weights.

mod cli_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use cli_support::{
    Procs, admin_listen, binary, exchange_with_head, free_port, gateway_metrics, scratch_dir,
    start_sim_engine, wait_for,
};
use tokenscale_e2e::http::header;

/// The limited tenant's key: 5 requests per minute on each model.
const KEY_LIMITED: &str = "key-limited";
/// A tenant limited the same way that may use only `model-a` (and the route).
const KEY_NARROW: &str = "key-narrow";
/// A tenant without limits, for the spread.
const KEY_FREE: &str = "key-free";

fn chat(model: &str) -> String {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 1,
    })
    .to_string()
}

/// One chat request for `model` with `key`: `(status, head, body)`.
fn ask(api: SocketAddr, key: &str, model: &str) -> (u16, String, String) {
    exchange_with_head(
        api,
        "POST",
        "/v1/chat/completions",
        Some(key),
        &chat(model),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("POST for {model}: {e}"))
}

/// The model that answered: the header, checked against the body's `model`.
fn served_by(status: u16, head: &str, body: &str) -> String {
    assert_eq!(status, 200, "{head}\n{body}");
    let named = header(head, "x-tokenscale-model").expect("x-tokenscale-model on the answer");
    let answer: serde_json::Value = serde_json::from_str(body).expect("JSON answer");
    assert_eq!(
        answer["model"], named,
        "the body's model and the header agree"
    );
    named.to_string()
}

fn retry_after(head: &str) -> u64 {
    header(head, "retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a 429 with retry-after: {head}"))
}

fn start_gateway(procs: &mut Procs, dir: &std::path::Path) -> SocketAddr {
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, cli_support::SIM_PROFILE).expect("profile");
    let profile = profile.display().to_string();
    let a = start_sim_engine(procs, &profile, "model-a");
    let b = start_sim_engine(procs, &profile, "model-b");
    let hash = tokenscale_gateway::auth::hash_key;
    let config = dir.join("gateway.yaml");
    std::fs::write(
        &config,
        format!(
            "models:\n  - name: model-a\n    upstreams: [\"http://{a}\"]\n  - name: model-b\n    upstreams: [\"http://{b}\"]\n\
             routes:\n  - name: chat\n    targets: [{{model: model-a}}]\n    fallback: [model-b]\n\
             \x20 - name: spread\n    targets: [{{model: model-a, weight: 3}}, {{model: model-b, weight: 1}}]\n\
             tenants:\n  - name: limited\n    keys: [\"{}\"]\n    limits: {{requests_per_minute: 5}}\n\
             \x20 - name: narrow\n    keys: [\"{}\"]\n    models: [chat, model-a]\n    limits: {{requests_per_minute: 5}}\n\
             \x20 - name: free\n    keys: [\"{}\"]\n\
             health: {{interval_ms: 200, stale_after_ms: 2000, timeout_ms: 500}}\n",
            hash(KEY_LIMITED),
            hash(KEY_NARROW),
            hash(KEY_FREE),
        ),
    )
    .expect("config");
    let api: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    procs.0.push(
        Command::new(binary("tokenscale-gateway"))
            .arg("--config")
            .arg(&config)
            .args(["--listen", &api.to_string()])
            .args(admin_listen(api))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("gateway.log")).expect("log"))
            .spawn()
            .expect("gateway starts"),
    );
    wait_for("both replicas ready", Duration::from_secs(30), || {
        gateway_metrics(api).is_ok_and(|(_, text)| {
            ["model-a", "model-b"].iter().all(|m| {
                text.contains(&format!(
                    "tokenscale_gateway_replicas{{model_name=\"{m}\",state=\"ready\"}} 1"
                ))
            })
        })
    });
    api
}

#[test]
fn a_route_falls_back_over_separate_limits_and_spreads_by_weight() {
    let dir = scratch_dir("route");
    let mut procs = Procs::default();
    let api = start_gateway(&mut procs, &dir);

    // Five on model-a, then model-a's limit refuses and model-b serves the next five.
    let served: Vec<String> = (0..10)
        .map(|_| {
            let (status, head, body) = ask(api, KEY_LIMITED, "chat");
            served_by(status, &head, &body)
        })
        .collect();
    let expected: Vec<&str> = [["model-a"; 5], ["model-b"; 5]].concat();
    assert_eq!(
        served, expected,
        "a tenant over model-a's limit is served by model-b"
    );

    // Both spent: 429 with the retry-after of the limit that passes sooner (model-a's, spent
    // first), which is no later than model-b's own.
    let (status, head, body) = ask(api, KEY_LIMITED, "chat");
    assert_eq!(status, 429, "{head}\n{body}");
    let route_retry = retry_after(&head);
    let (status, b_head, _) = ask(api, KEY_LIMITED, "model-b");
    assert_eq!(status, 429);
    let (status, a_head, _) = ask(api, KEY_LIMITED, "model-a");
    assert_eq!(status, 429);
    println!(
        "retry-after: route {route_retry} s, model-a {} s, model-b {} s",
        retry_after(&a_head),
        retry_after(&b_head)
    );
    assert!(route_retry <= retry_after(&b_head), "{head}\n{b_head}");
    assert!(
        route_retry.abs_diff(retry_after(&a_head)) <= 1,
        "{head}\n{a_head}"
    );

    // A tenant that may not use model-b is never sent there: 429 once model-a is spent.
    for _ in 0..5 {
        let (status, head, body) = ask(api, KEY_NARROW, "chat");
        assert_eq!(served_by(status, &head, &body), "model-a");
    }
    let (status, head, body) = ask(api, KEY_NARROW, "chat");
    assert_eq!(
        status, 429,
        "the narrow tenant is refused, not sent to model-b: {head}\n{body}"
    );

    // The weighted spread: 3 to 1 over 1,000 requests.
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..1000 {
        let (status, head, body) = ask(api, KEY_FREE, "spread");
        *counts.entry(served_by(status, &head, &body)).or_default() += 1;
    }
    println!("spread over 1000 requests (weights 3:1): {counts:?}");
    let a = f64::from(counts.get("model-a").copied().unwrap_or(0));
    assert!((a / 1000.0 - 0.75).abs() <= 0.05 * 0.75, "{counts:?}");
    let b = f64::from(counts.get("model-b").copied().unwrap_or(0));
    assert!((b / 1000.0 - 0.25).abs() <= 0.05 * 0.25, "{counts:?}");

    // The metrics count the fallbacks by reason, and which model answered the route.
    let (_, text) = gateway_metrics(api).expect("metrics");
    for needle in [
        "tokenscale_gateway_route_fallbacks_total{route=\"chat\",from=\"model-a\",to=\"model-b\",reason=\"rate_limited\"} 6",
        "tokenscale_gateway_route_fallbacks_total{route=\"chat\",from=\"model-b\",to=\"none\",reason=\"rate_limited\"} 1",
        "tokenscale_gateway_route_fallbacks_total{route=\"chat\",from=\"model-a\",to=\"none\",reason=\"rate_limited\"} 1",
        "tokenscale_gateway_route_requests_total{route=\"chat\",model_name=\"model-b\"} 5",
        "tokenscale_gateway_route_requests_total{route=\"chat\",model_name=\"model-a\"} 10",
    ] {
        assert!(text.contains(needle), "/metrics lacks {needle}:\n{text}");
    }
    // The route is listed as a model.
    let (_, _, models) = exchange_with_head(
        api,
        "GET",
        "/v1/models",
        Some(KEY_FREE),
        "",
        Duration::from_secs(5),
    )
    .expect("models");
    assert!(models.contains("\"id\":\"chat\""), "{models}");
}
