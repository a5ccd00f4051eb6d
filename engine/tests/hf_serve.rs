//! The engine binary as a user runs it against a Hub (the local one, through `HF_ENDPOINT`):
//! `serve --model hf://ORG/REPO` fetches, loads the safetensors checkpoint with its tokenizer
//! and chat template, shows the resolved commit on `/v1/models` and in its metrics, and chats;
//! `pull` prints the snapshot and says the commit; a gated model without a token, and a
//! missing one, end `pull` with the one-line message and a failure status.

#![allow(clippy::unwrap_used)]

mod checkpoints_support;
mod hub_support;
mod server_support;

use std::path::Path;
use std::process::Command;

use checkpoints_support::tiny_models;
use hub_support::{Access, TestHub};
use serde_json::json;
use server_support::client::{self, post_json};
use server_support::spawn_ready;
use tokenscale_scratch::{Scratch, scratch};

const BIN: &str = env!("CARGO_BIN_EXE_tokenscale-engine");

/// The hub, the engine's HF home, and the folder that holds both (removed when dropped).
fn hub(label: &str) -> (TestHub, std::path::PathBuf, Scratch) {
    let root = scratch!(label);
    std::fs::create_dir_all(root.join("test-org")).unwrap();
    std::os::unix::fs::symlink(
        tiny_models().join("qwen3"),
        root.join("test-org/Qwen3-tiny"),
    )
    .unwrap();
    let home = root.join("hf-home");
    (TestHub::start(root.path()), home, root)
}

fn engine(hub: &TestHub, home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HOME", home)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_HUB_OFFLINE");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_fetches_an_hf_source_and_reports_its_commit() {
    let (hub, home, _root) = hub("hf-serve");
    let args = [
        "serve",
        "--model",
        "hf://test-org/Qwen3-tiny",
        "--backend",
        "cpu",
        "--port",
        "0",
    ];
    let (_engine, addr) = spawn_ready(&mut engine(&hub, &home, &args)).await;
    let commit =
        std::fs::read_to_string(home.join("hub/models--test-org--Qwen3-tiny/refs/main")).unwrap();
    let models = client::get(addr, "/v1/models").await.unwrap().json();
    let card = &models["data"][0];
    assert_eq!(
        card["id"], "test-org/Qwen3-tiny",
        "the repository is the served name"
    );
    assert_eq!(card["revision"], commit.as_str());
    let metrics = client::get(addr, "/metrics").await.unwrap().body;
    let info = metrics
        .lines()
        .find(|l| l.starts_with("tokenscale_engine_model_info{"))
        .unwrap();
    assert!(
        info.contains(&format!("revision=\"{commit}\"")) && info.contains("format=\"safetensors\""),
        "{info}"
    );
    let chat = json!({"model": "test-org/Qwen3-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0});
    let reply = post_json(addr, "/v1/chat/completions", &chat).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let usage = &reply.json()["usage"];
    // "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n": three control tokens and
    // 18 bytes, one token each in the tiny byte-level vocabulary.
    assert_eq!(usage["prompt_tokens"], 3 + 18);
    assert!(usage["completion_tokens"].as_u64().unwrap() >= 1);
}

#[test]
fn pull_prints_the_snapshot_and_names_what_is_wrong_otherwise() {
    let (hub, home, _root) = hub("hf-pull");
    let out = engine(&hub, &home, &["pull", "hf://test-org/Qwen3-tiny"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(Path::new(&path).join("config.json").is_file(), "{path}");
    assert!(
        stderr.contains("hf://test-org/Qwen3-tiny is at commit "),
        "{stderr}"
    );

    let out = engine(&hub, &home, &["pull", "hf://test-org/nope"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(
        stderr.trim(),
        "error: repository test-org/nope was not found on the Hub (404)"
    );

    hub.set_access(Access::Gated("hf_secret".into()));
    let out = engine(&hub, &home, &["pull", "hf://test-org/Qwen3-tiny@v2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("hf://test-org/Qwen3-tiny@v2: the Hub answered 401")
            && stderr.contains("set HF_TOKEN"),
        "{stderr}"
    );
    let out = engine(&hub, &home, &["pull", "hf://test-org/Qwen3-tiny@v2"])
        .env("HF_TOKEN", "hf_secret")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("revision of hf://test-org/Qwen3-tiny@v2 was not found"),
        "with the token, the 404: {stderr}"
    );
}
