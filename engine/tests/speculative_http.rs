//! Speculative decoding over HTTP: the real `tokenscale-engine serve --speculative ngram`
//! process on the real test model, driven by the official `openai` Python client
//! (`scripts/speculative_check.py`). At temperature 0 a rewrite of a given text is the same
//! with speculation as with `"speculative": false` (completions and chat, streamed and not),
//! the `vllm:spec_decode_*` counters grow for the speculative requests only, and a bad value
//! of the field gets a 400 that says what it expects.

mod server_support;

use server_support::{model_serve_command, run_python_check, spawn_ready};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_client_gets_the_same_text_with_and_without_speculation() {
    let args = ["--backend", "cpu", "--speculative", "ngram"];
    let (_engine, addr) = spawn_ready(&mut model_serve_command(&args)).await;
    let (ok, report) = run_python_check("speculative_check.py", &["openai"], addr).await;
    println!("{report}");
    assert!(ok, "{report}");
    assert!(report.contains("speculative check ok"), "{report}");
}
