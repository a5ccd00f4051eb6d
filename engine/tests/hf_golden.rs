//! SmolLM2 as the safetensors checkpoints GPU users deploy, served from the local Hub: the
//! test GGUF converted by `scripts/checkpoints/gguf_to_hf.py` into the Hugging Face layout
//! (f32 from the dequantised weights in one file; bf16 in two shards with an index), fetched
//! through `hf://` and loaded from the cache. Against the golden vectors of the float64
//! reference: the f32 checkpoint on the reference path reproduces every greedy token and keeps
//! the top-5 logits within 2e-2 (the GGUF path's bound); the bf16 checkpoint may pick another
//! token only where the reference's top-1/top-2 margin is below its measured logit error (the
//! GGUF fast path's rule). Its tokenizer.json gives the golden prompt ids. Served, the bf16
//! checkpoint is computed from its mapped files: no copy of the weights in process memory.

#![allow(clippy::unwrap_used)]

mod checkpoints_support;
mod common;
mod hub_support;
mod server_support;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use checkpoints_support::smollm2_hf;
use common::{assert_flips_within, assert_reproduces_golden, cases, forced_logits};
use hub_support::TestHub;
use tokenscale_common::hub_source::HubSource;
use tokenscale_engine::backend::cpu::{CpuBackend, CpuOptions, Precision};
use tokenscale_engine::fetch::hub::{HubConfig, fetch};
use tokenscale_engine::model::{Checkpoint, Model};
use tokenscale_engine::tokenizer::ChatMessage;
use tokenscale_scratch::scratch;

const BLOCK_SIZE: usize = 16;

/// The two checkpoints, served as `HuggingFaceTB/SmolLM2-135M-Instruct-{f32,bf16}` and fetched
/// once into a fresh cache: `(f32 dir, bf16 dir)` in the cache's snapshots.
fn fetched() -> &'static (PathBuf, PathBuf) {
    static DIRS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    DIRS.get_or_init(|| {
        // Kept for the process (a static's): swept once it has ended.
        let root = scratch!("hf-golden-hub").keep();
        let org = root.join("HuggingFaceTB");
        std::fs::create_dir_all(&org).unwrap();
        std::os::unix::fs::symlink(smollm2_hf("f32"), org.join("SmolLM2-135M-Instruct-f32"))
            .unwrap();
        std::os::unix::fs::symlink(smollm2_hf("bf16"), org.join("SmolLM2-135M-Instruct-bf16"))
            .unwrap();
        let hub = TestHub::start(&root);
        let config = HubConfig {
            endpoint: hub.endpoint(),
            token: None,
            cache_dir: root.join("cache"),
            offline: false,
            quiet: true,
            connections: 4,
        };
        let get = |repo: &str| {
            let source = HubSource::parse(&format!("hf://HuggingFaceTB/{repo}"))
                .unwrap()
                .unwrap();
            fetch(&source, &config).unwrap().path
        };
        (
            get("SmolLM2-135M-Instruct-f32"),
            get("SmolLM2-135M-Instruct-bf16"),
        )
    })
}

fn model(dir: &PathBuf) -> Arc<Model> {
    Arc::new(Checkpoint::open(dir).unwrap().load_model().unwrap())
}

fn backend(model: Arc<Model>, precision: Precision) -> CpuBackend {
    CpuBackend::new(
        model,
        8,
        BLOCK_SIZE,
        CpuOptions {
            precision,
            threads: 0,
        },
    )
    .unwrap()
}

/// The f32 checkpoint's teacher-forced logits on the reference path, per case: computed
/// once, both tests compare with them.
fn f32_reference_logits() -> &'static [Vec<Vec<f32>>] {
    static LOGITS: OnceLock<Vec<Vec<Vec<f32>>>> = OnceLock::new();
    LOGITS.get_or_init(|| {
        let (f32_dir, _) = fetched();
        let m = model(f32_dir);
        assert_eq!(m.config.architecture, "llama");
        assert!(m.config.tied_embeddings);
        let mut b = backend(m, Precision::Reference);
        cases()
            .iter()
            .map(|case| forced_logits(&mut b, case, BLOCK_SIZE))
            .collect()
    })
}

#[test]
fn the_f32_checkpoint_from_the_hub_reproduces_every_golden_token() {
    let worst = assert_reproduces_golden(&cases(), f32_reference_logits(), "safetensors f32");
    println!("safetensors f32, reference path: max top-5 logit error vs float64 = {worst:.5}");
}

#[test]
fn the_bf16_checkpoint_differs_only_within_its_measured_error() {
    let (_, bf16_dir) = fetched();
    let mut bf16 = backend(model(bf16_dir), Precision::Fast);
    let cases = cases();
    let runs: Vec<Vec<Vec<f32>>> = cases
        .iter()
        .map(|c| forced_logits(&mut bf16, c, BLOCK_SIZE))
        .collect();
    let mut max_err = 0f32;
    for (reference, run) in f32_reference_logits().iter().zip(&runs) {
        for (r, b) in reference.iter().flatten().zip(run.iter().flatten()) {
            max_err = max_err.max((r - b).abs());
        }
    }
    let flips = assert_flips_within(&cases, &runs, max_err, "bf16");
    println!(
        "safetensors bf16 (fast path): max logit error vs the f32 reference = {max_err:.4}; \
         tokens differing: {flips}"
    );
    assert!(max_err.is_finite() && max_err > 0.0);
}

#[test]
fn the_checkpoint_tokenizer_gives_the_golden_prompt_ids() {
    let (f32_dir, _) = fetched();
    let tokenizer = Checkpoint::open(f32_dir).unwrap().tokenizer().unwrap();
    let fixture: serde_json::Value = serde_json::from_str(common::FIXTURE).unwrap();
    for case in fixture["cases"].as_array().unwrap() {
        let want: Vec<u32> = case["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = match &case["prompt"] {
            serde_json::Value::String(text) => tokenizer.encode(text, true).unwrap(),
            prompt => {
                let messages: Vec<ChatMessage> =
                    serde_json::from_value(prompt["messages"].clone()).unwrap();
                tokenizer.encode_chat(&messages, true).unwrap()
            }
        };
        assert_eq!(got, want, "prompt {}", case["prompt"]);
        assert_eq!(
            tokenizer.decode(&got, false).unwrap(),
            case["text"].as_str().unwrap()
        );
    }
    assert_eq!(
        tokenizer.eos_token_ids().first(),
        Some(&0),
        "<|endoftext|> ends generation too"
    );
    assert!(tokenizer.eos_token_ids().contains(&2), "<|im_end|>");
}

/// `kB` values of `/proc/PID/status` lines.
fn status_kb(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_bf16_checkpoint_computes_from_its_mapped_file_without_a_copy() {
    let dir = smollm2_hf("bf16");
    let weights: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .map(|p| p.metadata().unwrap().len())
        .sum();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"));
    command
        .args([
            "serve",
            "--backend",
            "cpu",
            "--port",
            "0",
            "--kv-cache-tokens",
            "2048",
        ])
        .arg("--model")
        .arg(&dir);
    let (engine, addr) = server_support::spawn_ready(&mut command).await;
    let body = serde_json::json!({"prompt": "Hello", "max_tokens": 1, "temperature": 0});
    let reply = server_support::client::post_json(addr, "/v1/completions", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let pid = engine.0.id();
    let (peak, anon) = (
        status_kb(pid, "VmHWM:") * 1024,
        status_kb(pid, "RssAnon:") * 1024,
    );
    println!(
        "bf16 checkpoint served: peak RSS {:.1} MiB = {:.2} x its {:.1} MiB of weights; \
         anonymous memory {:.1} MiB",
        peak as f64 / 1048576.0,
        peak as f64 / weights as f64,
        weights as f64 / 1048576.0,
        anon as f64 / 1048576.0
    );
    // Weights widened to f32 would take twice their bytes of anonymous memory; used in place,
    // they are file pages and the process's own memory is the runtime and the tokenizer.
    assert!(
        anon * 4 < weights,
        "anonymous memory {anon} B for {weights} B of weights"
    );
}
