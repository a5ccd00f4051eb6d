//! Two real SmolLM2 engines serving LoRA adapters (`--lora`, made by
//! `scripts/checkpoints/make_lora.py`) behind the real gateway (`models[].adapters`): an
//! adapter's requests all go to one engine (its home, then the replica holding it), the
//! answers are the adapter's (as the engine gives them directly, not the base's), and the
//! official `openai` client's `models.list()` shows the adapters with their parent.

mod cli_support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use cli_support::{
    Procs, gateway_metrics, metric_sum, post, scratch_dir, start_engine, start_gateway, wait_for,
};

const MODEL: &str = "smollm2-135m";
const PROMPT: &str = "The capital of France is";

/// SmolLM2-135M's shapes: all `make_lora.py` reads of the base.
const BASE_CONFIG: &str = r#"{"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
 "num_attention_heads": 9, "num_key_value_heads": 3}"#;

/// A seeded adapter for the test model in `dir/name`; `None` (said as NOT RUN) without
/// `python3` and NumPy.
fn make_adapter(dir: &Path, name: &str, seed: u32) -> Option<String> {
    let mut python = not_run_without(tokenscale_e2e::tools::python_with("numpy"))?;
    let base = dir.join("base");
    std::fs::create_dir_all(&base).expect("base folder");
    std::fs::write(base.join("config.json"), BASE_CONFIG).expect("base config");
    let script = tokenscale_e2e::tools::workspace_root().join("scripts/checkpoints/make_lora.py");
    let out = dir.join(name);
    let status = python
        .arg(script)
        .arg(&base)
        .arg(&out)
        .args(["--seed", &seed.to_string()])
        .status()
        .expect("python3 starts");
    assert!(status.success(), "make_lora.py {name}");
    Some(format!("{name}={}", out.display()))
}

/// The command, or `None` after saying NOT RUN and why.
fn not_run_without<T>(tool: Result<T, tokenscale_e2e::tools::ToolError>) -> Option<T> {
    tool.map_err(|error| eprintln!("NOT RUN: {error}")).ok()
}

/// The text of a greedy completion of `model` from `addr`.
fn complete(addr: SocketAddr, model: &str) -> String {
    let body =
        serde_json::json!({"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0});
    let (status, text) = post(
        addr,
        "/v1/completions",
        &body.to_string(),
        Duration::from_secs(60),
    )
    .expect("completion");
    assert_eq!(status, 200, "{model}: {text}");
    let answer: serde_json::Value = serde_json::from_str(&text).expect("JSON answer");
    answer["choices"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Requests an engine finished (every model and adapter: they count under the base's name).
fn finished(engine: SocketAddr) -> f64 {
    let (_, text) = cli_support::get(engine, "/metrics").expect("engine metrics");
    metric_sum(&text, "vllm:e2e_request_latency_seconds_count").unwrap_or(0.0)
}

#[test]
fn adapter_requests_stay_on_one_engine_and_models_list_them_with_their_parent() {
    let dir = scratch_dir("lora-gateway");
    let (Some(sql), Some(legal)) = (make_adapter(&dir, "sql", 1), make_adapter(&dir, "legal", 2))
    else {
        return;
    };
    let model = tokenscale_engine::fetch::ensure_model(MODEL)
        .expect("the test model (scripts/setup fetches it)");
    let model = model.to_str().expect("utf-8 path");
    let args = [
        "--model",
        model,
        "--served-model-name",
        "base",
        "--lora",
        &sql,
        "--lora",
        &legal,
    ];
    let mut procs = Procs::default();
    let engines = [
        start_engine(&mut procs, &args, Duration::from_secs(120)),
        start_engine(&mut procs, &args, Duration::from_secs(120)),
    ];
    let config = format!(
        "models:\n  - name: base\n    upstreams: [\"http://{}\", \"http://{}\"]\n    adapters: [sql, legal]\n\
         anonymous: anon\nanonymous_any_key: true\ntenants:\n  - name: anon\n    keys: []\n\
         health: {{interval_ms: 200, stale_after_ms: 2000, timeout_ms: 1000}}\n",
        engines[0], engines[1]
    );
    let gateway = start_gateway(&mut procs, dir.path(), &config, "info", &[]);
    wait_for(
        "both engines ready behind the gateway",
        Duration::from_secs(30),
        || {
            gateway_metrics(gateway).is_ok_and(|(_, text)| {
                text.contains("tokenscale_gateway_replicas{model_name=\"base\",state=\"ready\"} 2")
            })
        },
    );
    // The adapter's own answer, as an engine gives it directly (not the base's).
    let direct = complete(engines[0], "sql");
    assert_ne!(
        direct,
        complete(engines[0], "base"),
        "the adapter changes the answer"
    );
    let before = engines.map(finished);
    for _ in 0..6 {
        assert_eq!(complete(gateway, "sql"), direct);
    }
    let served = [0, 1].map(|i| finished(engines[i]) - before[i]);
    assert!(
        served.contains(&6.0) && served.contains(&0.0),
        "sql served {served:?}"
    );
    let (_, text) = gateway_metrics(gateway).expect("gateway metrics");
    // A miss first (unless a scrape saw the direct request above on its engine), then hits.
    let adapter_requests = metric_sum(&text, "tokenscale_gateway_adapter_requests_total");
    assert_eq!(adapter_requests, Some(6.0), "{text}");
    let hits = |n| format!("adapter_requests_total{{model_name=\"base\",affinity=\"hit\"}} {n}");
    assert!(text.contains(&hits(5)) || text.contains(&hits(6)), "{text}");
    let Some(listed) = openai_models(gateway) else {
        return;
    };
    assert_eq!(
        listed,
        ["base None None", "sql base base", "legal base base"]
    );
}

/// `client.models.list()` of the official `openai` client through the gateway, as
/// `scripts/gateway_models_check.py` prints it (`id parent root`); `None` (NOT RUN) without it.
fn openai_models(gateway: SocketAddr) -> Option<Vec<String>> {
    let mut python = not_run_without(tokenscale_e2e::tools::python_with("openai"))?;
    let script = tokenscale_e2e::tools::workspace_root().join("scripts/gateway_models_check.py");
    let output = python
        .arg(script)
        .arg(format!("http://{gateway}/v1"))
        .arg("any-key")
        .output()
        .expect("python3 starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "gateway_models_check.py: {stderr}");
    let lines = String::from_utf8_lossy(&output.stdout).to_string();
    let field = |v: &serde_json::Value| v.as_str().unwrap_or("None").to_string();
    let listed = lines.lines().map(|line| {
        let m: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        format!(
            "{} {} {}",
            field(&m["id"]),
            field(&m["parent"]),
            field(&m["root"])
        )
    });
    Some(listed.collect())
}
