//! Fuzzing in CI: every fuzz target (`fuzz/fuzz_targets/`, built here without libFuzzer as the
//! `fuzz_*` binaries) replays its committed corpus and then seeded mutations of it for a few
//! seconds. A panic fails the test, naming the target and the input (saved under
//! `fuzz/artifacts/`).

use std::process::{Command, Stdio};

use tokenscale_e2e::tools::workspace_root;

/// Seconds of mutations per target (they run side by side).
const SECONDS_PER_TARGET: &str = "4";

const TARGETS: [(&str, &str); 12] = [
    ("gguf", env!("CARGO_BIN_EXE_fuzz_gguf")),
    ("openai_request", env!("CARGO_BIN_EXE_fuzz_openai_request")),
    ("metrics_text", env!("CARGO_BIN_EXE_fuzz_metrics_text")),
    ("json_members", env!("CARGO_BIN_EXE_fuzz_json_members")),
    (
        "gateway_request",
        env!("CARGO_BIN_EXE_fuzz_gateway_request"),
    ),
    ("sse_events", env!("CARGO_BIN_EXE_fuzz_sse_events")),
    ("stream_splice", env!("CARGO_BIN_EXE_fuzz_stream_splice")),
    ("hf_config", env!("CARGO_BIN_EXE_fuzz_hf_config")),
    ("hub_listing", env!("CARGO_BIN_EXE_fuzz_hub_listing")),
    ("tool_calls", env!("CARGO_BIN_EXE_fuzz_tool_calls")),
    (
        "batch_multipart",
        env!("CARGO_BIN_EXE_fuzz_batch_multipart"),
    ),
    ("batch_input", env!("CARGO_BIN_EXE_fuzz_batch_input")),
];

#[test]
fn every_fuzz_target_survives_its_corpus_and_its_mutations() {
    let root = workspace_root();
    let declared = std::fs::read_to_string(root.join("fuzz/Cargo.toml")).expect("fuzz/Cargo.toml");
    let names: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    for line in declared.lines().filter(|l| l.starts_with("name = ")) {
        let name = line.trim_start_matches("name = ").trim_matches('"');
        assert!(
            name == "tokenscale-fuzz" || names.contains(&name),
            "fuzz target {name} is not replayed in CI: add it here and to tests/Cargo.toml"
        );
    }
    // All at once: each runs for its time budget, whatever the cores.
    let runs: Vec<_> = TARGETS
        .iter()
        .map(|(name, binary)| {
            let corpus = root.join("fuzz/corpus").join(name);
            let child = Command::new(binary)
                .arg(&corpus)
                .args(["--seconds", SECONDS_PER_TARGET])
                .current_dir(&root)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("fuzz_{name} does not run: {e}"));
            (name, corpus, child)
        })
        .collect();
    let mut failures = Vec::new();
    for (name, corpus, child) in runs {
        let output = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("fuzz_{name}: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprint!("{text}");
        assert!(
            corpus.is_dir(),
            "no committed corpus at {}",
            corpus.display()
        );
        if !output.status.success() {
            failures.push(format!("{name}: {text}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
