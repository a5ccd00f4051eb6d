//! LoRA adapters on the test model, against the float64 NumPy reference: three adapters made
//! by `scripts/checkpoints/make_lora.py` for SmolLM2 (its test GGUF converted to f32
//! safetensors), each checked on the golden prompts against `reference_forward.py --lora`,
//! which merges `W + B A · alpha / r` in float64 and decodes greedily. The engine runs the
//! quantised GGUF (Q4_1) base with the deltas unmerged, in f32 beside it. Reference path: top-5
//! logits within 2e-2 of float64, and another greedy token only where the reference's
//! top-1/top-2 margin is below the measured error (the checkpoint tests' margin rule); fast
//! path: the margin rule with its error measured against the reference path.

#![allow(clippy::unwrap_used)]

mod checkpoints_support;
mod common;
mod server_support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use checkpoints_support::{run_script, smollm2_hf};
use common::{
    Case, Seq, assert_flips_within, backend, cases, forced_logits_with, model, run_greedy_with,
    strided_table,
};
use server_support::client::{get, post_json};
use tokenscale_engine::backend::cpu::Precision;
use tokenscale_engine::lora::{Lookup, LoraAdapter, LoraError, LoraLimits, LoraRegistry};
use tokenscale_scratch::scratch;

const BLOCK_SIZE: usize = 16;
/// Greedy tokens decoded after each golden prompt.
const STEPS: usize = 8;
const SEEDS: [u64; 3] = [1, 2, 3];
const LIMITS: LoraLimits = LoraLimits { max_rank: 64 };

/// The scratch folder holding the adapters (`a1`…`a3`, and broken ones on demand).
fn adapter_root() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Kept for the process (a static's): swept once it has ended.
        let dir = scratch!("lora-adapters").keep();
        for seed in SEEDS {
            make(&dir, &format!("a{seed}"), seed, &[]);
        }
        dir
    })
}

/// `make_lora.py` for the f32 SmolLM2 checkpoint into `root/name`.
fn make(root: &Path, name: &str, seed: u64, extra: &[&str]) -> PathBuf {
    let base = smollm2_hf("f32");
    let out = root.join(name);
    let seed = seed.to_string();
    let mut args = vec![
        base.to_str().unwrap(),
        out.to_str().unwrap(),
        "--seed",
        &seed,
    ];
    args.extend_from_slice(extra);
    run_script("make_lora.py", &args);
    out
}

fn load(name: &str) -> Arc<LoraAdapter> {
    let dir = adapter_root().join(name);
    let config = &model().config;
    Arc::new(tokenscale_engine::lora::load_adapter(name, &dir, config, LIMITS, 1).unwrap())
}

/// The float64 reference of adapter `name` on every golden prompt, as golden cases.
fn reference_cases(name: &str) -> Vec<Case> {
    let prompts: Vec<String> = cases()
        .iter()
        .map(|c| {
            let ids: Vec<String> = c.prompt_ids.iter().map(u32::to_string).collect();
            ids.join(",")
        })
        .collect();
    let text = run_script(
        "reference_forward.py",
        &[
            smollm2_hf("f32").to_str().unwrap(),
            "--lora",
            adapter_root().join(name).to_str().unwrap(),
            "--greedy",
            &STEPS.to_string(),
            "--prompts",
            &prompts.join(";"),
        ],
    );
    let runs: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        let a = v.as_array().unwrap();
        a.iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    cases()
        .iter()
        .zip(runs.as_array().unwrap())
        .map(|(case, run)| {
            let tokens = ids(&run["tokens"]);
            let top5 = run["top"]
                .as_array()
                .unwrap()
                .iter()
                .zip(run["top_logits"].as_array().unwrap())
                .map(|(t, l)| {
                    let logits = l.as_array().unwrap().iter().map(|x| x.as_f64().unwrap());
                    ids(t).into_iter().zip(logits).collect()
                })
                .collect();
            Case {
                prompt_ids: case.prompt_ids.clone(),
                greedy_ids: tokens[case.prompt_ids.len()..].to_vec(),
                top5,
            }
        })
        .collect()
}

/// Teacher-forced logits of every case with `adapter`, on `precision`.
fn runs(precision: Precision, cases: &[Case], adapter: &LoraAdapter) -> Vec<Vec<Vec<f32>>> {
    let mut b = backend(precision, 8, BLOCK_SIZE);
    cases
        .iter()
        .map(|c| forced_logits_with(&mut b, c, BLOCK_SIZE, Some(adapter)))
        .collect()
}

#[test]
fn each_adapter_matches_the_float64_reference_of_its_merged_weights() {
    // The float64 references (one NumPy process each) side by side.
    let references: Vec<Vec<Case>> = std::thread::scope(|s| {
        let runs: Vec<_> = SEEDS
            .iter()
            .map(|seed| s.spawn(move || reference_cases(&format!("a{seed}"))))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (seed, cases) in SEEDS.iter().zip(references) {
        let name = format!("a{seed}");
        let adapter = load(&name);
        let reference = runs(Precision::Reference, &cases, &adapter);
        let mut top5_err = 0f64;
        for (case, run) in cases.iter().zip(&reference) {
            for (row, top5) in run.iter().zip(&case.top5) {
                for &(id, want) in top5 {
                    top5_err = top5_err.max((f64::from(row[id as usize]) - want).abs());
                }
            }
        }
        assert!(top5_err < 2e-2, "{name}: top-5 logit error {top5_err}");
        let flips = assert_flips_within(&cases, &reference, top5_err as f32, &name);
        let fast = runs(Precision::Fast, &cases, &adapter);
        let mut fast_err = 0f32;
        for (r, f) in reference.iter().flatten().zip(fast.iter().flatten()) {
            for (a, b) in r.iter().zip(f) {
                fast_err = fast_err.max((a - b).abs());
            }
        }
        let fast_flips = assert_flips_within(&cases, &fast, fast_err, &name);
        println!(
            "{name} on the Q4_1 base: reference path top-5 error vs float64 {top5_err:.5} \
             ({flips} tokens differ); fast path error vs reference {fast_err:.4} \
             ({fast_flips} tokens differ)"
        );
        let golden = common::cases();
        assert!(
            cases
                .iter()
                .zip(&golden)
                .any(|(c, g)| c.greedy_ids[..] != g.greedy_ids[..STEPS]),
            "{name} changes the base model's output"
        );
    }
}

/// Each of `prompt` run alone and all four in one batch (3 adapters and the base).
#[test]
fn three_adapters_and_the_base_in_one_batch_each_get_their_own_tokens() {
    let adapters: Vec<Arc<LoraAdapter>> = SEEDS.iter().map(|s| load(&format!("a{s}"))).collect();
    let per_seq: Vec<Option<&LoraAdapter>> = [None]
        .into_iter()
        .chain(adapters.iter().map(|a| Some(a.as_ref())))
        .collect();
    let prompt = cases()[0].prompt_ids.clone();
    let blocks = (prompt.len() + STEPS).div_ceil(BLOCK_SIZE);
    let mut b = backend(Precision::Reference, 4 * blocks, BLOCK_SIZE);
    let mut alone = Vec::new();
    for a in &per_seq {
        let mut seq = [Seq::new(&prompt, strided_table(0, 1, blocks))];
        alone.push(run_greedy_with(&mut b, &mut seq, 64, STEPS, &[*a]).remove(0));
    }
    let mut seqs: Vec<Seq> = (0..4)
        .map(|i| Seq::new(&prompt, strided_table(i, 4, blocks)))
        .collect();
    let together = run_greedy_with(&mut b, &mut seqs, 64, STEPS, &per_seq);
    assert_eq!(together, alone, "batched rows take their own adapter");
    for i in 0..4 {
        for j in i + 1..4 {
            assert_ne!(together[i], together[j], "sequences {i} and {j}");
        }
    }
}

#[test]
fn broken_adapters_are_refused_with_the_reason() {
    let root = scratch!("lora-broken");
    let registry = LoraRegistry::new(
        model().config.clone(),
        "base".into(),
        LoraLimits { max_rank: 16 },
        4,
        None,
    );
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "wrong-rank",
            &["--break", "wrong-rank"],
            "has shape [8, 576], expected [12, 576] for rank r=12",
        ),
        (
            "missing-tensor",
            &["--break", "missing-tensor"],
            "lora_B.weight is missing",
        ),
        (
            "other-base",
            &["--break", "other-base"],
            "made for other/Base-270M",
        ),
        ("too-large", &["--rank", "32"], "exceeds --max-lora-rank 16"),
        ("bad-target", &[], "target module \"lm_head\""),
    ];
    for (name, args, reason) in cases {
        let dir = make(root.path(), name, 7, args);
        if name == "bad-target" {
            let path = dir.join("adapter_config.json");
            let mut c: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            c["target_modules"] = serde_json::json!(["q_proj", "lm_head"]);
            std::fs::write(&path, c.to_string()).unwrap();
        }
        let err = registry.load(name, dir.to_str().unwrap()).unwrap_err();
        assert!(matches!(err, LoraError::Invalid { .. }), "{name}: {err}");
        assert!(err.to_string().contains(reason), "{name}: {err}");
    }
    let missing = registry
        .load("nowhere", "/nonexistent/adapter")
        .unwrap_err();
    assert!(missing.to_string().contains("not a folder"), "{missing}");
    assert!(registry.list().is_empty(), "nothing broken was registered");
}

#[test]
fn at_most_max_loras_adapters_stay_in_memory_least_recently_used_first_out() {
    let registry = LoraRegistry::new(model().config.clone(), "base".into(), LIMITS, 2, None);
    let dir = |n: &str| adapter_root().join(n).to_str().unwrap().to_string();
    let first = registry.load("a1", &dir("a1")).unwrap();
    let a2 = registry.load("a2", &dir("a2")).unwrap();
    assert!(matches!(registry.lookup("a1"), Lookup::Loaded(_)));
    registry.load("a3", &dir("a3")).unwrap();
    assert_eq!(
        registry.resident(),
        ["a1", "a3"],
        "a2 was least recently used"
    );
    assert!(matches!(registry.lookup("a2"), Lookup::Evicted));
    let again = registry.reload("a2").unwrap();
    assert_eq!(registry.resident(), ["a2", "a3"]);
    assert_ne!(
        again.cache_salt(None),
        a2.cache_salt(None),
        "weights read again never share the old ones' cached blocks"
    );
    assert!(matches!(registry.lookup("a9"), Lookup::Unknown));
    assert!(matches!(
        registry.load("a1", &dir("a1")),
        Err(LoraError::Exists(_))
    ));
    registry.unload("a1").unwrap();
    assert!(matches!(registry.unload("a1"), Err(LoraError::NotFound(_))));
    assert_eq!(
        first.name, "a1",
        "a running request keeps its weights after unload"
    );
    let unsupported = LoraRegistry::new(
        model().config.clone(),
        "base".into(),
        LIMITS,
        2,
        Some("cuda"),
    );
    let err = unsupported.load("a1", &dir("a1")).unwrap_err();
    assert!(
        err.to_string()
            .contains("not supported by the cuda backend"),
        "{err}"
    );
}

/// Decode tokens per second of a batch of 6 sequences whose rows use 0, 1 or 3 adapters (fast
/// path, as served); printed for the README, never asserted on (the machine is shared).
#[test]
fn throughput_with_0_1_and_3_adapters_in_a_batch() {
    let adapters: Vec<Arc<LoraAdapter>> = SEEDS.iter().map(|s| load(&format!("a{s}"))).collect();
    let prompt = cases()[0].prompt_ids.clone();
    let steps = 32;
    let blocks = (prompt.len() + steps).div_ceil(BLOCK_SIZE);
    let mut b = backend(Precision::Fast, 6 * blocks, BLOCK_SIZE);
    let mut line = String::new();
    for used in [0usize, 1, 3] {
        let per_seq: Vec<Option<&LoraAdapter>> = (0..6)
            .map(|i| (used > 0).then(|| adapters[i % used].as_ref()))
            .collect();
        let mut seqs: Vec<Seq> = (0..6)
            .map(|i| Seq::new(&prompt, strided_table(i, 6, blocks)))
            .collect();
        // The prompts first, untimed; then `steps` decode steps of 6 rows.
        run_greedy_with(&mut b, &mut seqs, 64, 1, &per_seq);
        let started = Instant::now();
        let out = run_greedy_with(&mut b, &mut seqs, 64, steps, &per_seq);
        let rate = (6 * steps) as f64 / started.elapsed().as_secs_f64();
        line += &format!("{used} adapters: {rate:.1} tok/s; ");
        assert!(out.iter().all(|o| o.len() == steps));
    }
    println!("LoRA decode, batch of 6 (SmolLM2 Q4_1, fast path): {line}");
}

/// `text` of a greedy 8-token completion of the golden prompt by `model` (status, body).
async fn complete(addr: std::net::SocketAddr, model: &str) -> (u16, String) {
    let body = serde_json::json!({
        "model": model, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
    });
    let reply = post_json(addr, "/v1/completions", &body).await;
    if reply.status != 200 {
        return (reply.status, reply.body);
    }
    let json = reply.json();
    assert_eq!(json["model"], model, "the response names the adapter");
    (
        200,
        json["choices"][0]["text"].as_str().unwrap().to_string(),
    )
}

/// `serve`'s flags for the HTTP test, before `--lora`'s value.
const FLAGS: &str = "serve --backend cpu --port 0 --kv-cache-tokens 2048 \
                     --served-model-name base --max-loras 2 --lora";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_loads_adapters_at_start_and_at_run_time_and_batches_them() {
    let dir = |n: &str| adapter_root().join(n).to_str().unwrap().to_string();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"));
    command
        .args(FLAGS.split(' '))
        .arg(format!("a1={}", dir("a1")))
        .arg("--model")
        .arg(server_support::model_path());
    let (_engine, addr) = server_support::spawn_ready(&mut command).await;
    let load = |name: &str, path: String| {
        let body = serde_json::json!({"lora_name": name, "lora_path": path});
        async move { post_json(addr, "/v1/load_lora_adapter", &body).await }
    };
    for name in ["a2", "a3"] {
        let reply = load(name, dir(name)).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let models = get(addr, "/v1/models").await.unwrap().json();
    let cards = models["data"].as_array().unwrap();
    let ids: Vec<&str> = cards.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["base", "a1", "a2", "a3"]);
    assert_eq!(cards[2]["parent"], "base");
    assert_eq!(cards[2]["root"], dir("a2").as_str());
    assert!(cards[0].get("parent").is_none());

    // Alone, then all four at once (one batch; three adapters with --max-loras 2, so one is
    // read again from its folder on the way).
    let names = ["base", "a1", "a2", "a3"];
    let mut alone = Vec::new();
    for name in names {
        alone.push(complete(addr, name).await);
    }
    let together = futures::future::join_all(names.map(|n| complete(addr, n))).await;
    assert_eq!(together, alone);
    for i in 0..4 {
        assert_eq!(alone[i].0, 200, "{}", alone[i].1);
        for j in i + 1..4 {
            assert_ne!(alone[i].1, alone[j].1, "{} and {}", names[i], names[j]);
        }
    }
    let metrics = get(addr, "/metrics").await.unwrap().body;
    assert!(
        metrics.contains("vllm:lora_requests_info{running_lora_adapters=\"\",max_lora=\"2\",waiting_lora_adapters=\"\"}"),
        "{metrics}"
    );

    let unload = |name: &str| {
        let body = serde_json::json!({"lora_name": name});
        async move { post_json(addr, "/v1/unload_lora_adapter", &body).await }
    };
    assert_eq!(unload("a2").await.status, 200);
    assert_eq!(complete(addr, "a2").await.0, 404);
    assert_eq!(unload("a2").await.status, 404);
    let again = load("a1", dir("a1")).await;
    assert!(
        again.status == 400 && again.body.contains("already been loaded"),
        "{}",
        again.body
    );
    let root = scratch!("lora-serve-broken");
    let broken = make(root.path(), "other", 5, &["--break", "other-base"]);
    let refused = load("other", broken.to_str().unwrap().to_string()).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("made for other/Base-270M"),
        "{}",
        refused.body
    );
    assert_eq!(complete(addr, "a3").await, alone[3], "a3 still served");
}
