//! `tokenscale-engine bench`: prefill and batched-decode throughput of the CPU backend on a
//! model, the figures llama.cpp's `llama-bench` / `llama-batched-bench` report.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::backend::cpu::{CpuBackend, CpuOptions, Precision};
use crate::backend::{Backend, SeqStep};
use crate::model::Model;

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// `hf://ORG/REPO[@REVISION][/FILE]`, a `.gguf` file, a checkpoint directory, or the
    /// test alias `smollm2-135m`.
    #[arg(long, default_value = "smollm2-135m")]
    pub model: String,
    /// Numbers of sequences decoding together, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    pub batch: Vec<usize>,
    /// Prompt length of every sequence, in tokens.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens each sequence decodes.
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Run the f32 reference path instead of the quantised fast path.
    #[arg(long)]
    pub reference: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One batch size's decode figures.
#[derive(Debug, Serialize)]
pub struct BenchPoint {
    pub batch: usize,
    /// Aggregate over all sequences.
    pub decode_tokens_per_s: f64,
    /// Mean time of one decode step of the whole batch.
    pub step_ms: f64,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub model: String,
    pub backend: &'static str,
    pub precision: &'static str,
    pub threads: usize,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    /// One `prompt_tokens` prompt in one forward call.
    pub prefill_tokens_per_s: f64,
    pub points: Vec<BenchPoint>,
}

const BLOCK_SIZE: usize = 16;

/// Runs `bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.prompt_tokens > 0 && args.gen_tokens > 0,
        "--prompt-tokens and --gen-tokens must be > 0"
    );
    let path =
        crate::fetch::ensure_model(&args.model).with_context(|| format!("model {}", args.model))?;
    eprintln!("loading {}", path.display());
    let (_, model) = crate::model::load(&path)?;
    let model = Arc::new(model);
    let max_batch = args.batch.iter().copied().max().unwrap_or(1).max(1);
    let blocks_per_seq = (args.prompt_tokens + args.gen_tokens).div_ceil(BLOCK_SIZE);
    let precision = if args.reference {
        Precision::Reference
    } else {
        Precision::Fast
    };
    let options = CpuOptions {
        precision,
        threads: args.threads,
    };
    let mut backend = CpuBackend::new(
        model.clone(),
        max_batch * blocks_per_seq,
        BLOCK_SIZE,
        options,
    )?;
    let threads = if args.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        args.threads
    };

    let prefill_tokens_per_s = measure_prefill(&mut backend, &model, &args, blocks_per_seq)?;
    if !args.json {
        println!(
            "prefill {} tokens: {prefill_tokens_per_s:.1} tokens/s",
            args.prompt_tokens
        );
    }
    let mut points = Vec::new();
    for &batch in &args.batch {
        let point = measure_decode(&mut backend, &model, &args, batch.max(1), blocks_per_seq)?;
        if !args.json {
            println!(
                "decode, {:>3} seqs: {:>7.1} tokens/s aggregate, step {:>7.1} ms",
                point.batch, point.decode_tokens_per_s, point.step_ms
            );
        }
        points.push(point);
    }
    let report = BenchReport {
        model: args.model.clone(),
        backend: "cpu",
        precision: if args.reference { "reference" } else { "fast" },
        threads,
        prompt_tokens: args.prompt_tokens,
        gen_tokens: args.gen_tokens,
        prefill_tokens_per_s,
        points,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// Deterministic prompt ids for sequence `seq` (ordinary tokens, no control tokens).
fn prompt(seq: usize, len: usize, vocab: usize) -> Vec<u32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (seq as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (1000 + (state >> 33) as usize % (vocab.saturating_sub(1000).max(1))) as u32
        })
        .collect()
}

fn table(seq: usize, blocks_per_seq: usize) -> Vec<u32> {
    (seq * blocks_per_seq..(seq + 1) * blocks_per_seq)
        .map(|b| b as u32)
        .collect()
}

fn measure_prefill(
    backend: &mut CpuBackend,
    model: &Model,
    args: &BenchArgs,
    bps: usize,
) -> anyhow::Result<f64> {
    let tokens = prompt(0, args.prompt_tokens, model.config.vocab_size);
    let block_table = table(0, bps);
    let step = SeqStep {
        tokens: &tokens,
        start_pos: 0,
        block_table: &block_table,
        want_logits: true,
    };
    backend.forward(&[step])?; // warm-up: page in weights, start threads
    let mut best_s = f64::INFINITY;
    for _ in 0..2 {
        let start = Instant::now();
        backend.forward(&[step])?;
        best_s = best_s.min(start.elapsed().as_secs_f64());
    }
    Ok(args.prompt_tokens as f64 / best_s)
}

fn measure_decode(
    backend: &mut CpuBackend,
    model: &Model,
    args: &BenchArgs,
    batch: usize,
    bps: usize,
) -> anyhow::Result<BenchPoint> {
    let vocab = model.config.vocab_size;
    let tables: Vec<Vec<u32>> = (0..batch).map(|s| table(s, bps)).collect();
    let prompts: Vec<Vec<u32>> = (0..batch)
        .map(|s| prompt(s, args.prompt_tokens, vocab))
        .collect();
    // Prefill (not timed) in groups that keep each step's matrices a reasonable size.
    for group in (0..batch).collect::<Vec<_>>().chunks(8) {
        let steps: Vec<SeqStep<'_>> = group
            .iter()
            .map(|&s| SeqStep {
                tokens: &prompts[s],
                start_pos: 0,
                block_table: &tables[s],
                want_logits: true,
            })
            .collect();
        backend.forward(&steps)?;
    }
    // Decode: feed each sequence's greedy token back (real data dependence, real logits).
    let mut next: Vec<u32> = vec![prompts[0][0]; batch];
    let start = Instant::now();
    for i in 0..args.gen_tokens {
        let pos = args.prompt_tokens + i;
        let steps: Vec<SeqStep<'_>> = (0..batch)
            .map(|s| SeqStep {
                tokens: std::slice::from_ref(&next[s]),
                start_pos: pos,
                block_table: &tables[s],
                want_logits: true,
            })
            .collect();
        let out = backend.forward(&steps)?;
        let chosen: Vec<u32> = (0..batch)
            .map(|s| out.logits_of(s, vocab).map_or(0, argmax))
            .collect();
        next = chosen;
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    let steps = args.gen_tokens as f64;
    Ok(BenchPoint {
        batch,
        decode_tokens_per_s: batch as f64 * steps / elapsed_s,
        step_ms: elapsed_s * 1000.0 / steps,
    })
}

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}
