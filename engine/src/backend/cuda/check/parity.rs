//! Checkpoint parity on the GPU: any checkpoint (the tiny Llama 3.1 / Qwen2 / Qwen3 / Mistral
//! ones of `scripts/checkpoints/tiny_models.py`, a converted SmolLM2) run on the CUDA backend
//! and on the CPU reference backend over the same seeded tokens: a prefill chunk, then decode
//! steps through the graphs, past the models' original RoPE contexts. Each step's logits as
//! ‖Δ‖/‖ref‖, and greedy agreement where the reference's top-2 margin is clear.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use super::reference::rel_err;
use crate::backend::cpu::{CpuBackend, CpuOptions, Precision};
use crate::backend::cuda::{CudaBackend, CudaOptions};
use crate::backend::{Backend, SeqStep};
use crate::model::Checkpoint;

/// Bound on ‖Δ‖/‖ref‖ of a step's logits: bf16 weights and activations against f32.
pub const TOLERANCE: f64 = 3e-2;
/// Tokens fed in all: a prefill chunk of `PREFILL`, then one at a time.
const TOKENS: usize = 64;
const PREFILL: usize = 16;
const BLOCK: usize = 16;

/// One checkpoint's outcome.
#[derive(Debug, Clone)]
pub struct Parity {
    pub name: String,
    /// Largest ‖Δ‖/‖ref‖ over the steps.
    pub max_rel_err: f64,
    /// Steps whose greedy tokens differ although the reference's top-2 margin exceeds 0.1.
    pub clear_flips: usize,
    pub steps: usize,
    pub pass: bool,
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(0, |b, (i, &x)| if x > row[b] { i } else { b })
}

/// Logits of every step of `tokens` on `backend`.
fn run(backend: &mut dyn Backend, tokens: &[u32]) -> anyhow::Result<Vec<Vec<f32>>> {
    let vocab = backend.model_config().vocab_size;
    let table: Vec<u32> = (0..TOKENS.div_ceil(BLOCK) as u32).collect();
    let mut out = Vec::new();
    let mut start = 0;
    while start < tokens.len() {
        let len = if start == 0 { PREFILL } else { 1 };
        let step = SeqStep {
            tokens: &tokens[start..start + len],
            start_pos: start,
            block_table: &table,
            want_logits: true,
        };
        let logits = backend.forward(&[step])?;
        out.push(logits.logits_of(0, vocab).context("no logits")?.to_vec());
        start += len;
    }
    Ok(out)
}

/// Runs the checkpoint at `path` on both backends.
pub fn run_checkpoint(path: &Path) -> anyhow::Result<Parity> {
    let checkpoint = Checkpoint::open(path)?;
    let config = checkpoint.config()?;
    // Seeded token ids inside the vocabulary (xorshift; the same on every run).
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let tokens: Vec<u32> = (0..TOKENS)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % config.vocab_size as u64) as u32
        })
        .collect();
    let options = CudaOptions {
        max_model_len: Some(TOKENS.next_multiple_of(BLOCK)),
        max_num_seqs: 4,
        max_batch_tokens: 64,
        max_kv_blocks: Some(TOKENS.div_ceil(BLOCK)),
        ..CudaOptions::default()
    };
    let mut gpu = CudaBackend::new(&checkpoint, options)?;
    let gpu_logits = run(&mut gpu, &tokens)?;
    drop(gpu);
    let cpu_options = CpuOptions {
        precision: Precision::Reference,
        threads: 0,
    };
    let model = Arc::new(checkpoint.load_model()?);
    let mut cpu = CpuBackend::new(model, TOKENS.div_ceil(BLOCK), BLOCK, cpu_options)?;
    let cpu_logits = run(&mut cpu, &tokens)?;
    let mut max_rel_err = 0f64;
    let mut clear_flips = 0;
    for (g, c) in gpu_logits.iter().zip(&cpu_logits) {
        let want: Vec<f64> = c.iter().map(|&x| f64::from(x)).collect();
        max_rel_err = max_rel_err.max(rel_err(g, &want));
        let best = argmax(c);
        let mut sorted = c.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if argmax(g) != best && sorted[0] - sorted[1] > 0.1 {
            clear_flips += 1;
        }
    }
    Ok(Parity {
        name: path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        max_rel_err,
        clear_flips,
        steps: gpu_logits.len(),
        pass: max_rel_err <= TOLERANCE && clear_flips == 0,
    })
}

/// Formats the results as a table.
pub fn table(rows: &[Parity]) -> String {
    let mut s = format!(
        "{:<32} {:>6} {:>12} {:>12} {:>6}\n",
        "checkpoint (gpu vs cpu ref)", "steps", "rel_err max", "clear flips", "pass"
    );
    for r in rows {
        s += &format!(
            "{:<32} {:>6} {:>12.3e} {:>12} {:>6}\n",
            r.name,
            r.steps,
            r.max_rel_err,
            r.clear_flips,
            if r.pass { "yes" } else { "NO" }
        );
    }
    s
}
