//! `tokenscale bench --calibrate` against an engine running the `sim` backend, whose true
//! performance model is known: the fitted profile must give it back (within the noise of
//! client-side timing on a shared machine), and `tokenscale sim` must accept the file.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::process::Command;
use std::time::Duration;

use cli_support::{Procs, binary, get, scratch_dir, start_engine, wait_exit};
use tokenscale_common::perf_model::PerfProfile;

/// The profile the engine simulates: slow enough steps that timer and HTTP noise stay small.
const TRUE_PROFILE: &str = "
name: truth
gpus_per_replica: 1
step: {t0_s: 0.008, prefill_s_per_token: 0.00004, decode_s_per_seq: 0.0002, kv_read_s_per_token: 0.0}
kv: {block_tokens: 16, blocks: 4096}
max_num_seqs: 128
max_batch_tokens: 4096
cold_start_s: 1
";

#[test]
fn calibration_recovers_the_simulated_model_and_sim_reads_it() {
    let dir = scratch_dir("calibrate-e2e");
    let truth_path = dir.join("truth.yaml");
    std::fs::write(&truth_path, TRUE_PROFILE).unwrap();
    let truth = PerfProfile::from_yaml(TRUE_PROFILE).unwrap();
    let mut procs = Procs::default();
    let addr = start_engine(
        &mut procs,
        &[
            "--backend",
            "sim",
            "--sim-profile",
            truth_path.to_str().unwrap(),
            "--served-model-name",
            "sim-model",
            "--max-batch-tokens",
            "4096",
        ],
        Duration::from_secs(60),
    );
    // The sim backend says so where clients look first.
    let (status, models) = get(addr, "/v1/models").unwrap();
    assert_eq!(status, 200);
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["backend"], "sim", "{models}");
    assert_eq!(models["data"][0]["simulated"], true, "{models}");

    let fitted_path = dir.join("fitted.yaml");
    let mut bench = Command::new(binary("tokenscale"))
        .args([
            "bench",
            "--url",
            &format!("http://{addr}"),
            "--model",
            "sim-model",
        ])
        .args(["--concurrency", "1,16,48", "--requests", "48"])
        .args(["--input-tokens", "128", "--output-tokens", "24"])
        .args([
            "--cold-start",
            "5s",
            "--max-num-seqs",
            "128",
            "--max-batch-tokens",
            "4096",
        ])
        .arg("--calibrate")
        .arg(&fitted_path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("bench starts");
    let status = wait_exit(
        &mut bench,
        "tokenscale bench --calibrate",
        Duration::from_secs(300),
    );
    assert!(status.success(), "calibration failed: {status}");

    let text = std::fs::read_to_string(&fitted_path).expect("profile written");
    let fitted = PerfProfile::from_yaml(&text).expect("the written profile is valid");
    let (t, f) = (truth.step, fitted.step);
    let within = |name: &str, got: f64, want: f64, share: f64| {
        assert!(
            (got - want).abs() <= share * want,
            "{name}: fitted {got}, true {want}\n{text}"
        );
    };
    // The fixed cost also carries the server's per-step overhead; the slopes are what matter.
    within("t0_s", f.t0_s, t.t0_s, 0.5);
    within(
        "prefill_s_per_token",
        f.prefill_s_per_token,
        t.prefill_s_per_token,
        0.3,
    );
    within(
        "decode_s_per_seq",
        f.decode_s_per_seq,
        t.decode_s_per_seq,
        0.5,
    );
    assert_eq!(
        (fitted.kv.block_tokens, fitted.kv.blocks),
        (16, 4096),
        "read from /metrics"
    );
    assert_eq!((fitted.max_num_seqs, fitted.max_batch_tokens), (128, 4096));
    assert_eq!(fitted.cold_start_s, 5.0);
    assert!(
        text.contains("simulated"),
        "the profile says where it came from:\n{text}"
    );

    // The fitted file drives a fleet simulation.
    let sim = Command::new(binary("tokenscale"))
        .args([
            "sim",
            "--trace",
            "ramp",
            "--duration",
            "10m",
            "--policy",
            "tokenscale",
        ])
        .arg("--profile")
        .arg(&fitted_path)
        .output()
        .expect("sim runs");
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
}
