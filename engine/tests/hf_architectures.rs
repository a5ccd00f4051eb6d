//! Each architecture feature against an independent reference: tiny random-weight checkpoints
//! made by `scripts/checkpoints/tiny_models.py` (Llama 3.1 with `llama3` RoPE scaling and
//! positions past its original context, Qwen2 with q/k/v biases, Qwen3 with q/k norms and a
//! head size of its own plus `yarn`, Mistral with `linear` scaling in f16; untied and tied
//! heads; bf16, f16 and f32; one file and shards), run on the CPU reference path and compared
//! with `reference_forward.py`, a float64 NumPy forward written from the architectures'
//! definitions: the top-5 logits of every one of 64 positions within 1e-3.

#![allow(clippy::unwrap_used)]

mod checkpoints_support;

use std::sync::Arc;

use checkpoints_support::{reference, tiny_models};
use tokenscale_engine::backend::cpu::{CpuBackend, CpuOptions, Precision};
use tokenscale_engine::backend::{Backend, SeqStep};
use tokenscale_engine::model::{Checkpoint, RopeScaling};

const POSITIONS: usize = 64;
const TOLERANCE: f64 = 1e-3;

/// Logits of every position (`[positions][vocab]`), and of each chunk's last position when
/// the tokens go as prefill chunks: `(position, [vocab])`.
type Runs = (Vec<Vec<f32>>, Vec<(usize, Vec<f32>)>);

/// Logits of every position: one token per step (the decode path), then the same tokens as
/// prefill chunks of 24 (logits at each chunk's end only).
fn run(name: &str, tokens: &[u32], precision: Precision) -> Runs {
    let checkpoint = Checkpoint::open(tiny_models().join(name)).unwrap();
    let model = Arc::new(checkpoint.load_model().unwrap());
    let vocab = model.config.vocab_size;
    let options = CpuOptions {
        precision,
        threads: 2,
    };
    let table: Vec<u32> = (0..(tokens.len() as u32).div_ceil(16)).collect();
    let mut backend = CpuBackend::new(model.clone(), table.len(), 16, options).unwrap();
    let mut per_step = Vec::new();
    for p in 0..tokens.len() {
        let step = SeqStep {
            tokens: &tokens[p..p + 1],
            start_pos: p,
            block_table: &table,
            want_logits: true,
        };
        per_step.push(
            backend
                .forward(&[step])
                .unwrap()
                .logits_of(0, vocab)
                .unwrap()
                .to_vec(),
        );
    }
    let mut backend = CpuBackend::new(model, table.len(), 16, options).unwrap();
    let mut chunked = Vec::new();
    for start in (0..tokens.len()).step_by(24) {
        let end = (start + 24).min(tokens.len());
        let step = SeqStep {
            tokens: &tokens[start..end],
            start_pos: start,
            block_table: &table,
            want_logits: true,
        };
        chunked.push((
            end - 1,
            backend
                .forward(&[step])
                .unwrap()
                .logits_of(0, vocab)
                .unwrap()
                .to_vec(),
        ));
    }
    (per_step, chunked)
}

/// Runs `name` against the reference; returns the largest top-5 logit error.
fn check(name: &str) -> f64 {
    let dir = tiny_models().join(name);
    let want = reference(&dir, POSITIONS, 7);
    let (per_step, chunked) = run(name, &want.tokens, Precision::Reference);
    let mut worst = 0f64;
    for (pos, row) in per_step.iter().enumerate() {
        for (&id, &logit) in want.top[pos].iter().zip(&want.top_logits[pos]) {
            let err = (f64::from(row[id as usize]) - logit).abs();
            worst = worst.max(err);
            assert!(
                err < TOLERANCE,
                "{name} position {pos} token {id}: {} vs {logit}",
                row[id as usize]
            );
        }
        let best = row
            .iter()
            .enumerate()
            .fold(0, |b, (i, &x)| if x > row[b] { i } else { b });
        let margin = want.top_logits[pos][0] - want.top_logits[pos][1];
        assert!(
            best as u32 == want.top[pos][0] || margin < TOLERANCE,
            "{name} position {pos}: argmax"
        );
    }
    for (pos, row) in &chunked {
        for (a, b) in row.iter().zip(&per_step[*pos]) {
            assert!(
                (a - b).abs() < 1e-4,
                "{name}: chunked prefill differs at position {pos}"
            );
        }
    }
    println!("{name}: max top-5 logit error vs float64 over {POSITIONS} positions = {worst:.2e}");
    worst
}

#[test]
fn llama31_with_llama3_rope_scaling_past_its_original_context() {
    let config = Checkpoint::open(tiny_models().join("llama31"))
        .unwrap()
        .config()
        .unwrap();
    assert!(matches!(
        config.rope_scaling,
        RopeScaling::Llama3 {
            original_context: 32,
            ..
        }
    ));
    assert!(!config.tied_embeddings);
    check("llama31");
}

#[test]
fn qwen2_with_qkv_biases_and_a_tied_head_from_shards() {
    let config = Checkpoint::open(tiny_models().join("qwen2"))
        .unwrap()
        .config()
        .unwrap();
    assert!(config.qkv_bias && config.tied_embeddings);
    check("qwen2");
}

#[test]
fn qwen3_with_qk_norms_its_own_head_size_and_yarn() {
    let config = Checkpoint::open(tiny_models().join("qwen3"))
        .unwrap()
        .config()
        .unwrap();
    assert!(config.qk_norm && config.q_dim() != config.hidden_size);
    assert!(matches!(config.rope_scaling, RopeScaling::Yarn { .. }));
    check("qwen3");
}

#[test]
fn mistral_with_linear_rope_scaling_in_f16() {
    check("mistral");
}

#[test]
fn the_fast_path_on_float_weights_stays_close_to_the_reference() {
    // Float weights are computed in f32 on both paths; the fast path keeps keys and values
    // in f16, which is its only difference.
    let want = reference(&tiny_models().join("qwen3"), POSITIONS, 7);
    let (fast, _) = run("qwen3", &want.tokens, Precision::Fast);
    let mut worst = 0f64;
    for (pos, row) in fast.iter().enumerate() {
        for (&id, &logit) in want.top[pos].iter().zip(&want.top_logits[pos]) {
            worst = worst.max((f64::from(row[id as usize]) - logit).abs());
        }
    }
    println!("qwen3 fast path: max top-5 logit error = {worst:.2e}");
    assert!(worst < 5e-2, "{worst}");
}

#[test]
fn the_tokenizer_files_give_tokens_eos_and_chat_template() {
    let checkpoint = Checkpoint::open(tiny_models().join("qwen3")).unwrap();
    let tok = checkpoint.tokenizer().unwrap();
    assert_eq!(tok.encode("hi", true).unwrap(), [104, 105]);
    assert_eq!(tok.encode("<|im_end|>", true).unwrap(), [258]);
    // generation_config.json lists 258 and 256; tokenizer_config.json names <|im_end|>.
    assert_eq!(tok.eos_token_ids(), [256, 258]);
    assert!(!tok.adds_bos());
    let text = tok
        .apply_chat_template(
            &[tokenscale_engine::tokenizer::ChatMessage::new("user", "hi")],
            true,
        )
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(tok.decode(&[104, 105, 258], true).unwrap(), "hi");
}

#[test]
fn a_checkpoint_without_the_weights_its_config_needs_is_refused_by_name() {
    // Qwen3's config over Qwen2's weights: the q/k norms are missing.
    let dir = tokenscale_scratch::scratch!("wrong-weights");
    let qwen2 = tiny_models().join("qwen2");
    for entry in std::fs::read_dir(&qwen2).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    std::fs::write(
        dir.join("config.json"),
        config.replace("Qwen2ForCausalLM", "Qwen3ForCausalLM"),
    )
    .unwrap();
    let err = Checkpoint::open(&dir)
        .unwrap()
        .load_model()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.layers.0.self_attn.q_norm.weight is missing"),
        "{err}"
    );
    std::fs::write(
        dir.join("config.json"),
        config.replace("Qwen2ForCausalLM", "Qwen2MoeForCausalLM"),
    )
    .unwrap();
    let err = Checkpoint::open(&dir).unwrap_err().to_string();
    assert!(
        err.contains("Qwen2MoeForCausalLM is not supported"),
        "{err}"
    );
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).unwrap();
    std::fs::write(dir.join("config.json"), &config).unwrap();
    let err = Checkpoint::open(&dir).unwrap_err().to_string();
    assert!(err.contains("model-00002-of-00002.safetensors"), "{err}");
}

#[test]
fn an_attention_output_bias_is_refused_with_the_reason() {
    // transformers' Llama attention with attention_bias has a bias on o_proj too, which the
    // forward does not apply: the checkpoint is refused, not run without it.
    let dir = tokenscale_scratch::scratch!("o-proj-bias");
    let llama = tiny_models().join("llama31");
    for entry in std::fs::read_dir(&llama).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config["attention_bias"] = serde_json::Value::Bool(true);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let err = Checkpoint::open(&dir).unwrap_err().to_string();
    assert!(
        err.contains("attention_bias is true") && err.contains("self_attn.o_proj.bias"),
        "{err}"
    );
}
