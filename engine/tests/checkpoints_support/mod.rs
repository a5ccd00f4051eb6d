//! Test checkpoints made by the repository's scripts (`scripts/checkpoints/`): tiny random
//! models of each architecture feature, SmolLM2 converted from the test GGUF to the Hugging
//! Face layout, and the independent float64 NumPy reference forward. The scripts need NumPy and
//! the `gguf` package, which `scripts/setup` installs into `.cache/tools/python`; without them
//! these tests fail with that instruction (never skip).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::Digest;
use tokenscale_scratch::scratch;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scripts() -> PathBuf {
    repo_root().join("scripts/checkpoints")
}

/// `python3 scripts/checkpoints/SCRIPT args…`, with the tools' packages on the path; panics
/// with the script's stderr when it fails.
pub fn run_script(script: &str, args: &[&str]) -> String {
    let tools = repo_root().join(".cache/tools/python");
    let out = Command::new("python3")
        .arg(scripts().join(script))
        .args(args)
        .env("PYTHONPATH", &tools)
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} {args:?} failed{}:\n{stderr}",
        if stderr.contains("No module named") {
            " (NumPy or gguf missing: run scripts/setup, which installs them into .cache/tools/python)"
        } else {
            ""
        }
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The tiny checkpoints (`llama31`, `qwen2`, `qwen3`, `mistral`), made once per test binary.
pub fn tiny_models() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Kept for the process (a static): swept once it has ended.
        let dir = scratch!("tiny-models").keep();
        run_script("tiny_models.py", &[dir.to_str().expect("utf-8 path")]);
        dir
    })
}

/// The test GGUF model (fetched by the project's set-up).
pub fn smollm2_gguf() -> PathBuf {
    tokenscale_engine::fetch::ensure_model("smollm2-135m")
        .expect("the test model is cached or can be fetched")
}

/// SmolLM2 as a Hugging Face checkpoint in `dtype` (`f32`: one file; `bf16`: two shards and
/// an index). Converted once and kept under the test target directory, keyed by the
/// converter's source, so later runs reuse it; made in a scratch folder and renamed into
/// place, so concurrent test binaries never see half a checkpoint.
pub fn smollm2_hf(dtype: &str) -> PathBuf {
    let script = std::fs::read(scripts().join("gguf_to_hf.py")).expect("read the converter");
    let layout = std::fs::read(scripts().join("hf_layout.py")).expect("read the layout helper");
    let key: String = sha2::Sha256::digest([script, layout].concat())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("smollm2-hf-{dtype}-{key}"));
    if dir.join("config.json").is_file() {
        return dir;
    }
    // Unique per call (the helper's folders are): two tests of one binary may both make it.
    let tmp = scratch!(&format!("smollm2-hf-{dtype}-making"));
    let shards = if dtype == "bf16" { "2" } else { "1" };
    let gguf = smollm2_gguf();
    run_script(
        "gguf_to_hf.py",
        &[
            gguf.to_str().expect("utf-8"),
            tmp.path().to_str().expect("utf-8"),
            "--dtype",
            dtype,
            "--shards",
            shards,
        ],
    );
    // When another test got there first the rename fails, and `tmp` goes with its guard.
    let _ = std::fs::rename(tmp.path(), &dir);
    dir
}

/// The reference forward's output for a checkpoint: the token ids fed, and per position the
/// top-5 ids and logits.
pub struct Reference {
    pub tokens: Vec<u32>,
    pub top: Vec<Vec<u32>>,
    pub top_logits: Vec<Vec<f64>>,
}

/// Runs the float64 reference on `checkpoint` with `n` seeded random tokens.
pub fn reference(checkpoint: &Path, n: usize, seed: u64) -> Reference {
    let text = run_script(
        "reference_forward.py",
        &[
            checkpoint.to_str().expect("utf-8"),
            "--tokens",
            &n.to_string(),
            "--seed",
            &seed.to_string(),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&text).expect("reference output is JSON");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    };
    Reference {
        tokens: ids(&v["tokens"]),
        top: v["top"].as_array().expect("top").iter().map(ids).collect(),
        top_logits: v["top_logits"]
            .as_array()
            .expect("top_logits")
            .iter()
            .map(|r| {
                r.as_array()
                    .expect("row")
                    .iter()
                    .map(|x| x.as_f64().expect("logit"))
                    .collect()
            })
            .collect(),
    }
}
