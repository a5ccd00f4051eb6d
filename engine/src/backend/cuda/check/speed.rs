//! Decode speed on the GPU against its roofline: step time and aggregate tokens/s at several
//! batch sizes with fixed-length contexts, versus (bytes of weights + KV read per step) ÷
//! the device's measured copy bandwidth.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;

use crate::backend::SeqStep;
use crate::backend::cuda::{CudaBackend, CudaOptions, DeviceSampling, Gpu};
use crate::model::{Checkpoint, ModelConfig, RopeLayout, RopeScaling};

const WARMUP_STEPS: usize = 3;
const TIMED_STEPS: usize = 20;
const BLOCK: usize = 16;

/// One measured point.
#[derive(Debug, Clone)]
pub struct SpeedPoint {
    pub model: String,
    pub batch: usize,
    pub context: usize,
    pub step_ms: f64,
    pub tokens_per_s: f64,
    pub roofline_tokens_per_s: f64,
}

/// Aggregate tokens/s a decode step could reach if it only streamed its bytes: the weights
/// once plus every sequence's KV (`kv_bytes_per_token × context`) at `bandwidth_bytes_per_s`.
pub fn roofline_tokens_per_s(
    weight_bytes: usize,
    kv_bytes_per_token: usize,
    batch: usize,
    context: usize,
    bandwidth_bytes_per_s: f64,
) -> f64 {
    let bytes = weight_bytes as f64 + (batch * context * kv_bytes_per_token) as f64;
    batch as f64 * bandwidth_bytes_per_s / bytes
}

/// Llama 3.2 1B's shape (random weights).
pub fn llama_1b() -> ModelConfig {
    ModelConfig {
        architecture: "llama".into(),
        num_layers: 16,
        hidden_size: 2048,
        ffn_size: 8192,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 64,
        rope_base: 500_000.0,
        rope_layout: RopeLayout::HalfSplit,
        rope_scaling: RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192,
        },
        rms_norm_eps: 1e-5,
        context_length: 131_072,
        vocab_size: 128_256,
        tied_embeddings: true,
        qkv_bias: false,
        qk_norm: false,
    }
}

fn options(batches: &[usize], context: usize) -> CudaOptions {
    let max_batch = batches.iter().copied().max().unwrap_or(1).max(1);
    let max_model_len = (context + WARMUP_STEPS + TIMED_STEPS + 1).next_multiple_of(BLOCK);
    CudaOptions {
        block_size: BLOCK,
        max_model_len: Some(max_model_len),
        max_num_seqs: max_batch,
        max_batch_tokens: max_batch,
        max_kv_blocks: Some(max_batch * max_model_len / BLOCK),
        ..CudaOptions::default()
    }
}

/// Measures the model at `path` (a GGUF file or a checkpoint directory).
pub fn bench_file(
    path: &Path,
    batches: &[usize],
    context: usize,
) -> anyhow::Result<Vec<SpeedPoint>> {
    let checkpoint = Checkpoint::open(path)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut backend = CudaBackend::new(&checkpoint, options(batches, context))?;
    bench(&mut backend, &name, batches, context)
}

/// Measures a random-weight model of Llama 3.2 1B's shape.
pub fn bench_random_1b(batches: &[usize], context: usize) -> anyhow::Result<Vec<SpeedPoint>> {
    let mut backend = CudaBackend::new_random(llama_1b(), options(batches, context), 1)?;
    bench(&mut backend, "llama-1b-shape (random)", batches, context)
}

fn bench(
    backend: &mut CudaBackend,
    name: &str,
    batches: &[usize],
    context: usize,
) -> anyhow::Result<Vec<SpeedPoint>> {
    let bandwidth = copy_bandwidth(backend.gpu())?;
    let cfg = crate::backend::Backend::model_config(backend).clone();
    let kv_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2;
    let blocks_per_seq = (context + WARMUP_STEPS + TIMED_STEPS + 1).div_ceil(BLOCK);
    let mut points = Vec::new();
    for &batch in batches {
        let tables: Vec<Vec<u32>> = (0..batch)
            .map(|s| {
                (0..blocks_per_seq)
                    .map(|b| (s * blocks_per_seq + b) as u32)
                    .collect()
            })
            .collect();
        let tokens: Vec<[u32; 1]> = (0..batch)
            .map(|s| [(s * 31 % cfg.vocab_size) as u32])
            .collect();
        let sampling = vec![
            DeviceSampling {
                temperature: 0.0,
                top_k: 0,
                top_p: 1.0,
                uniform: 0.0
            };
            batch
        ];
        // Keys and values of the first `context − 1` positions are whatever the cache holds
        // (zeros): attention reads them all the same, which is what is being timed.
        let mut step = |k: usize| -> anyhow::Result<()> {
            let steps: Vec<SeqStep<'_>> = (0..batch)
                .map(|s| SeqStep {
                    tokens: &tokens[s],
                    start_pos: context - 1 + k,
                    block_table: &tables[s],
                    want_logits: true,
                })
                .collect();
            backend
                .forward_sample(&steps, &sampling, None)
                .with_context(|| format!("decode step at batch {batch}"))?;
            Ok(())
        };
        for k in 0..WARMUP_STEPS {
            step(k)?;
        }
        let start = Instant::now();
        for k in WARMUP_STEPS..WARMUP_STEPS + TIMED_STEPS {
            step(k)?;
        }
        let step_s = start.elapsed().as_secs_f64() / TIMED_STEPS as f64;
        let mid_context = context + WARMUP_STEPS + TIMED_STEPS / 2;
        points.push(SpeedPoint {
            model: name.to_string(),
            batch,
            context,
            step_ms: step_s * 1e3,
            tokens_per_s: batch as f64 / step_s,
            roofline_tokens_per_s: roofline_tokens_per_s(
                backend.weight_bytes(),
                kv_per_token,
                batch,
                mid_context,
                bandwidth,
            ),
        });
    }
    Ok(points)
}

/// Device copy bandwidth in bytes/s (read + write counted) over a 1 GiB buffer.
fn copy_bandwidth(gpu: &Gpu) -> anyhow::Result<f64> {
    let n = 1usize << 30;
    let src = gpu.stream.alloc_zeros::<u8>(n)?;
    let mut dst = gpu.stream.alloc_zeros::<u8>(n)?;
    gpu.stream.memcpy_dtod(&src, &mut dst)?;
    gpu.stream.synchronize()?;
    let reps = 10;
    let start = Instant::now();
    for _ in 0..reps {
        gpu.stream.memcpy_dtod(&src, &mut dst)?;
    }
    gpu.stream.synchronize()?;
    Ok(2.0 * (n * reps) as f64 / start.elapsed().as_secs_f64())
}

/// Formats the points as a table.
pub fn table(points: &[SpeedPoint]) -> String {
    let mut s = format!(
        "{:<34} {:>6} {:>8} {:>10} {:>14} {:>16} {:>8}\n",
        "decode speed", "batch", "context", "step_ms", "tokens_per_s", "roofline_tok_s", "% roof"
    );
    for p in points {
        s += &format!(
            "{:<34} {:>6} {:>8} {:>10.3} {:>14.0} {:>16.0} {:>7.1}%\n",
            p.model,
            p.batch,
            p.context,
            p.step_ms,
            p.tokens_per_s,
            p.roofline_tokens_per_s,
            100.0 * p.tokens_per_s / p.roofline_tokens_per_s
        );
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn roofline_counts_weights_once_and_kv_per_sequence() {
        // 1 GB weights, no KV, 1 TB/s: 1000 steps/s, one token each.
        assert!((roofline_tokens_per_s(1_000_000_000, 0, 1, 512, 1e12) - 1000.0).abs() < 1e-6);
        // Batch 2 with 1 GB of KV each: 3 GB per step → 333 steps/s × 2 tokens.
        let r = roofline_tokens_per_s(1_000_000_000, 1_000_000, 2, 1000, 1e12);
        assert!((r - 2000.0 / 3.0).abs() < 1e-6, "{r}");
    }

    #[test]
    fn bench_options_hold_every_sequence() {
        let o = options(&[1, 32, 256], 512);
        assert_eq!(o.max_num_seqs, 256);
        let len = o.max_model_len.unwrap();
        assert!(len >= 512 + WARMUP_STEPS + TIMED_STEPS && len.is_multiple_of(BLOCK));
        assert_eq!(o.max_kv_blocks, Some(256 * len / BLOCK));
    }
}
