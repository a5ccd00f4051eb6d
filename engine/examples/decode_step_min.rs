//! The time of one batched decode step on the CPU backend, the same step repeated at a fixed
//! context (each repeat writes the same cache slot again), so every sample costs the same work
//! and the minimum over many is a figure a busy machine disturbs little. Prints the minimum
//! and the median; never asserts.
//!
//! With `prefill` as the sixth argument, the step timed is instead the prefill of BATCH prompts
//! of CONTEXT tokens each, from position 0 (a prompt burst's step: 4 × 128 is 512 tokens, the
//! default step budget).
//!
//! `cargo run --release -p tokenscale-engine --example decode_step_min -- MODEL [BATCH]
//! [CONTEXT] [STEPS] [THREADS] [decode|prefill]` (MODEL: a `.gguf` file or the alias
//! `smollm2-135m`)

use std::sync::Arc;
use std::time::Instant;

use tokenscale_engine::backend::cpu::{CpuBackend, CpuOptions};
use tokenscale_engine::backend::{Backend, SeqStep};

const BLOCK: usize = 16;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let model_arg = args.get(1).map_or("smollm2-135m", String::as_str);
    let batch: usize = args.get(2).map_or(Ok(32), |a| a.parse())?;
    let context: usize = args.get(3).map_or(Ok(192), |a| a.parse())?;
    let steps: usize = args.get(4).map_or(Ok(60), |a| a.parse())?;
    let threads: usize = args.get(5).map_or(Ok(2), |a| a.parse())?;
    let prefill_mode = match args.get(6).map(String::as_str) {
        None | Some("decode") => false,
        Some("prefill") => true,
        Some(other) => anyhow::bail!("the sixth argument is decode or prefill, not {other:?}"),
    };
    anyhow::ensure!(
        batch > 0 && context > 0 && steps > 0,
        "batch, context, steps must be > 0"
    );
    let path = tokenscale_engine::fetch::ensure_model(model_arg)?;
    let (_, model) = tokenscale_engine::model::load(&path)?;
    let model = Arc::new(model);
    let per_seq = (context + 1).div_ceil(BLOCK);
    let mut backend = CpuBackend::new(
        model.clone(),
        batch * per_seq,
        BLOCK,
        CpuOptions {
            threads,
            ..CpuOptions::default()
        },
    )?;
    let tables: Vec<Vec<u32>> = (0..batch)
        .map(|s| (s * per_seq..(s + 1) * per_seq).map(|b| b as u32).collect())
        .collect();
    // Ordinary token ids (the values do not change the cost).
    let ids: Vec<Vec<u32>> = (0..batch)
        .map(|s| {
            (0..=context)
                .map(|i| 1000 + ((i + 31 * s) * 7919 % 40000) as u32)
                .collect()
        })
        .collect();
    for group in (0..batch).collect::<Vec<_>>().chunks(8) {
        let prefill: Vec<SeqStep<'_>> = group
            .iter()
            .map(|&s| SeqStep {
                tokens: &ids[s][..context],
                start_pos: 0,
                block_table: &tables[s],
                want_logits: false,
            })
            .collect();
        backend.forward(&prefill)?;
    }
    // A prefill step runs each prompt from position 0; a decode step the token after it.
    let (tokens, start_pos) = match prefill_mode {
        true => (0..context, 0),
        false => (context..context + 1, context),
    };
    let step: Vec<SeqStep<'_>> = (0..batch)
        .map(|s| SeqStep {
            tokens: &ids[s][tokens.clone()],
            start_pos,
            block_table: &tables[s],
            want_logits: true,
        })
        .collect();
    let mut ms = Vec::with_capacity(steps);
    for _ in 0..steps + 2 {
        let start = Instant::now();
        backend.forward(&step)?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let mut ms = ms.split_off(2); // warm-up
    ms.sort_by(f64::total_cmp);
    println!(
        "{} batch {batch} context {context} threads {threads}: step min {:.2} ms, median {:.2} ms \
         ({steps} steps)",
        if prefill_mode { "prefill" } else { "decode" },
        ms[0],
        ms[ms.len() / 2]
    );
    Ok(())
}
