//! The gateway's `/metrics` names every model and tenant, so it is served only on the admin
//! listener (`--admin-listen`): a real gateway process over a simulated engine, two tenants,
//! and everything one tenant's key (or no key) can ask on the API port, none of which names
//! the other tenant or a model it may not use (issue 36).

mod cli_support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use cli_support::{
    Procs, admin_listen, binary, exchange, free_port, gateway_metrics, scratch_dir,
    start_sim_engine, wait_for,
};

/// The model both tenants may use (the engine's served name).
const MODEL: &str = "admin-sim";
/// A model only `other-team` may use.
const SECRET_MODEL: &str = "secret-model";
/// The tenant whose key probes the API port.
const KEY_A: &str = "key-team-a";
/// The other tenant's key.
const KEY_B: &str = "key-other-team";

fn chat(model: &str) -> String {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 4,
    })
    .to_string()
}

/// `(status, body)` of `method path` on `addr`, sent with `key`.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> (u16, String) {
    exchange(addr, method, path, key, body, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

#[test]
fn metrics_are_on_the_admin_port_and_the_api_port_names_no_other_tenant() {
    let dir = scratch_dir("admin-port");
    let mut procs = Procs::default();
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, cli_support::SIM_PROFILE).expect("profile");
    let engine = start_sim_engine(&mut procs, &profile.display().to_string(), MODEL);

    let hash = tokenscale_gateway::auth::hash_key;
    let config = dir.join("gateway.yaml");
    std::fs::write(
        &config,
        format!(
            "models:\n  - name: {MODEL}\n    upstreams: [\"http://{engine}\"]\n  - name: {SECRET_MODEL}\n    upstreams: [\"http://{engine}\"]\n\
             tenants:\n  - name: team-a\n    keys: [\"{}\"]\n    models: [{MODEL}]\n  - name: other-team\n    keys: [\"{}\"]\n    models: [{MODEL}, {SECRET_MODEL}]\n\
             health: {{interval_ms: 200, stale_after_ms: 2000, timeout_ms: 500}}\n",
            hash(KEY_A),
            hash(KEY_B),
        ),
    )
    .expect("config");
    let api: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let admin_flags = admin_listen(api);
    let admin: SocketAddr = admin_flags[1].parse().expect("the admin address");
    procs.0.push(
        Command::new(binary("tokenscale-gateway"))
            .arg("--config")
            .arg(&config)
            .args(["--listen", &api.to_string()])
            .args(&admin_flags)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("gateway.log")).expect("log"))
            .spawn()
            .expect("gateway starts"),
    );
    let ready = format!("tokenscale_gateway_replicas{{model_name=\"{MODEL}\",state=\"ready\"}} 1");
    wait_for(
        "the gateway to see its replica ready",
        Duration::from_secs(30),
        || gateway_metrics(api).is_ok_and(|(_, text)| text.contains(&ready)),
    );

    // The other tenant's traffic, so the admin port has its figures to leak.
    let (status, body) = call(
        api,
        "POST",
        "/v1/chat/completions",
        Some(KEY_B),
        &chat(MODEL),
    );
    assert_eq!(status, 200, "other-team's request: {body}");

    // The admin port: the whole Prometheus text, every tenant and model in it.
    let (status, text) = call(admin, "GET", "/metrics", None, "");
    assert_eq!(status, 200, "{text}");
    for needle in [
        "# TYPE tokenscale_gateway_requests_total counter",
        "tokenscale_gateway_tenant_requests_total{tenant=\"other-team\",model_name=\"admin-sim\"} 1",
        "model_name=\"secret-model\"",
    ] {
        assert!(
            text.contains(needle),
            "the admin port's /metrics lacks {needle}:\n{text}"
        );
    }

    // The API port: /metrics is an unknown path, key or no key.
    let names = [
        "other-team",
        "team-a",
        SECRET_MODEL,
        MODEL,
        "tokenscale_gateway",
    ];
    let (_, unknown) = call(api, "GET", "/no-such-path", None, "");
    for key in [None, Some(KEY_A), Some(KEY_B)] {
        let (status, body) = call(api, "GET", "/metrics", key, "");
        assert_eq!(status, 404, "API port /metrics with {key:?}: {body}");
        assert_eq!(
            body.replace("/metrics", "/no-such-path"),
            unknown,
            "API port /metrics with {key:?} answers as any unknown path"
        );
        for name in names {
            assert!(
                !body.contains(name),
                "API port /metrics with {key:?} names {name}: {body}"
            );
        }
    }

    // What team-a's key reaches: its models, and a refusal for the other tenant's model that
    // reads as for a model that does not exist.
    let (status, models) = call(api, "GET", "/v1/models", Some(KEY_A), "");
    assert_eq!(status, 200, "{models}");
    assert!(models.contains(MODEL), "{models}");
    for name in ["other-team", SECRET_MODEL] {
        assert!(
            !models.contains(name),
            "team-a's /v1/models names {name}: {models}"
        );
    }
    let (status, refused) = call(
        api,
        "POST",
        "/v1/chat/completions",
        Some(KEY_A),
        &chat(SECRET_MODEL),
    );
    assert_eq!(status, 404, "{refused}");
    let (_, missing) = call(
        api,
        "POST",
        "/v1/chat/completions",
        Some(KEY_A),
        &chat("no-such-model"),
    );
    assert_eq!(refused.replace(SECRET_MODEL, "no-such-model"), missing);
    assert!(!refused.contains("other-team"), "{refused}");

    // Probes reach /health on both ports; the admin port serves no API.
    for addr in [api, admin] {
        assert_eq!(
            call(addr, "GET", "/health", None, ""),
            (200, "ok".into()),
            "{addr}"
        );
    }
    let (status, body) = call(
        admin,
        "POST",
        "/v1/chat/completions",
        Some(KEY_A),
        &chat(MODEL),
    );
    assert_eq!(status, 404, "the admin port answered the API: {body}");
}
