//! `engine/gpu/check.sh --dry-run`: the GPU check's plumbing on the CPU backend, so the check
//! that runs on a lent GPU (rarely, with minutes of device time) does not first fail on a
//! shell mistake there. The GPU-only steps say what they would run; the speculative decoding
//! case runs for real on the CPU backend (tokens with drafts equal to without); the serving
//! steps start `tokenscale-engine serve` and drive it with `tokenscale bench` at small sizes,
//! and each writes its JSON report.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::process::Command;
use std::time::Duration;

use cli_support::{binary, free_port, scratch_dir, wait_exit};

#[test]
fn the_gpu_check_runs_end_to_end_on_the_cpu_backend() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = scratch_dir("gpu-check-dry-run");
    let mut check = Command::new("bash")
        .arg(root.join("engine/gpu/check.sh"))
        .arg("--dry-run")
        .env("BIN", binary("tokenscale-engine"))
        .env("BENCH", binary("tokenscale"))
        // The engine resolves the name from its model cache (the test set-up fetched it).
        .env("MODEL", "smollm2-135m")
        .env("OUT", &*out)
        .env("PORT", free_port().to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("check.sh starts");
    let status = wait_exit(&mut check, "check.sh --dry-run", Duration::from_secs(420));
    let log = std::fs::read_to_string(out.join("check-dry-run.log")).unwrap_or_default();
    assert!(
        status.success(),
        "check.sh --dry-run failed: {status}\n{log}"
    );
    for step in ["--compile-only", "--golden", "--parity", "--bench --model"] {
        assert!(
            log.contains("DRY RUN, needs a GPU") && log.contains(step),
            "the GPU step {step} is not named\n{log}"
        );
    }
    // The speculative case ran for real on the CPU backend: drafts verified, tokens equal.
    assert!(
        log.contains("speculative decoding (--speculative ngram, greedy) on cpu")
            && log.matches(" identical").count() >= 4
            && !log.contains("FAIL ("),
        "the speculative case did not pass on the CPU backend\n{log}"
    );
    for report in ["serve.json", "serve-long.json", "serve-mixed.json"] {
        let text = std::fs::read_to_string(out.join(report))
            .unwrap_or_else(|e| panic!("{report}: {e}\n{log}"));
        let json: serde_json::Value = serde_json::from_str(&text).expect("a JSON report");
        let points = json["points"].as_array().expect("points");
        assert!(!points.is_empty(), "{report} has no points");
        assert_eq!(json["server"]["backend"], "cpu", "{report}");
    }
}
