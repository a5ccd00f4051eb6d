//! The engine's own start by phase on `/metrics` (`tokenscale_engine_start_phase_seconds`):
//! the real binary exports fetch, load, warmup and ready once it serves, on the real model
//! and on the sim backend.

mod server_support;

use std::process::Command;

use server_support::{MODEL_NAME, client, model_path, promtool_check, spawn_ready};
use tokenscale_common::metrics::engine::{LABEL_PHASE, START_PHASE_SECONDS, START_PHASES};
use tokenscale_common::prom_text::parse;

/// `(phase, seconds)` of the start-phase family in `text`, in exposition order.
fn phases(text: &str) -> Vec<(String, f64)> {
    parse(text)
        .samples
        .into_iter()
        .filter(|s| s.name == START_PHASE_SECONDS)
        .map(|s| (s.label(LABEL_PHASE).unwrap_or("").to_string(), s.value))
        .collect()
}

/// Starts `tokenscale-engine serve` with `args` and returns its `/metrics` once it serves.
async fn metrics_after_start(args: &[&str]) -> String {
    let (_child, addr) = spawn_ready(
        Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"))
            .args(["serve", "--port", "0", "--served-model-name", MODEL_NAME])
            .args(args),
    )
    .await;
    let reply = client::get(addr, "/metrics").await.expect("GET /metrics");
    assert_eq!(reply.status, 200);
    reply.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_on_the_real_model_exports_each_start_phase_once_it_serves() {
    let model = model_path().display().to_string();
    let text = metrics_after_start(&["--model", &model, "--kv-cache-tokens", "4096"]).await;
    let phases = phases(&text);
    let names: Vec<&str> = phases.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, START_PHASES, "{text}");
    assert!(
        phases.iter().all(|(_, s)| s.is_finite() && *s >= 0.0),
        "{phases:?}"
    );
    // Reading and dequantising a GGUF file is never instantaneous: load was measured.
    let load = phases.iter().find(|(p, _)| p == "load").map(|(_, s)| *s);
    assert!(load.is_some_and(|s| s > 0.0), "{phases:?}");
    promtool_check(&text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_backend_exports_its_start_phases_too() {
    let text = metrics_after_start(&["--backend", "sim"]).await;
    let names: Vec<String> = phases(&text).into_iter().map(|(p, _)| p).collect();
    assert_eq!(names, START_PHASES, "{text}");
}
