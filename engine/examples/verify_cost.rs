//! What a speculative verify step costs on the CPU backend: one sequence's step with its decode
//! token and `k` draft tokens (every row's logits, as a verify step asks) against a plain
//! one-token step at the same context, in interleaved rounds. Prints medians, never asserts.
//!
//! `cargo run --release -p tokenscale-engine --example verify_cost -- [ROUNDS] [CONTEXT]
//! [MAX_K] [THREADS]` (THREADS 0: one per core)

use std::sync::Arc;
use std::time::Instant;

use tokenscale_engine::backend::cpu::{CpuBackend, CpuOptions};
use tokenscale_engine::backend::{Backend, SeqStep};
use tokenscale_engine::model::Model;
use tokenscale_engine::quant::{Acts, Q8Rows};
use tokenscale_engine::server::ServeConfig;

const BLOCK: usize = 16;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).map_or(Ok(40), |a| a.parse())?;
    let context: usize = args.get(2).map_or(Ok(300), |a| a.parse())?;
    let max_k: usize = args.get(3).map_or(Ok(8), |a| a.parse())?;
    let threads: usize = args.get(4).map_or(Ok(0), |a| a.parse())?;
    let path = tokenscale_engine::fetch::ensure_model(&ServeConfig::default().model)?;
    let (_, model) = tokenscale_engine::model::load(&path)?;
    let model = Arc::new(model);
    let blocks = (context + max_k + 1).div_ceil(BLOCK);
    let mut backend = CpuBackend::new(
        model.clone(),
        blocks,
        BLOCK,
        CpuOptions {
            threads,
            ..CpuOptions::default()
        },
    )?;
    let table: Vec<u32> = (0..blocks as u32).collect();
    // Ordinary token ids (the values do not change the cost).
    let ids: Vec<u32> = (0..context + max_k + 1)
        .map(|i| 1000 + (i * 7919 % 40000) as u32)
        .collect();
    let prompt = SeqStep {
        tokens: &ids[..context],
        start_pos: 0,
        block_table: &table,
        want_logits: true,
    };
    backend.forward(&[prompt])?;
    // (k, every row): k draft rows with every row's logits; k with the last row's only.
    let cases: Vec<(usize, bool)> = (0..=max_k)
        .flat_map(|k| [(k, true), (k, false)])
        .filter(|&(k, every)| k > 0 || !every)
        .collect();
    let mut times = vec![Vec::with_capacity(rounds); cases.len()];
    for round in 0..rounds + 2 {
        for (i, &(k, every)) in cases.iter().enumerate() {
            let step = SeqStep {
                tokens: &ids[context..context + 1 + k],
                start_pos: context,
                block_table: &table,
                want_logits: true,
            };
            let started = Instant::now();
            backend.forward_every_row(&[step], &[every])?;
            if round >= 2 {
                times[i].push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    let plain = medians[0];
    println!("context {context}, {rounds} interleaved rounds, medians:");
    for (&(k, every), ms) in cases.iter().zip(&medians) {
        let rows = if every { "every row" } else { "last row " };
        println!(
            "k={k:>2} {rows}: {ms:6.2} ms ({:+.2} ms per draft row)",
            (ms - plain) / k.max(1) as f64
        );
    }
    tiles(&model, rounds)?;
    Ok(())
}

/// The head and the first layer's matrices against `m` activation rows on one thread, weights
/// hot in cache: as one tile of `m` rows (what `linear` runs up to 8 rows) and as tiles of at
/// most 4 rows (the AVX-512 kernel pairs 8 weight rows with up to 4 activation rows, 4 with
/// more).
fn tiles(model: &Model, rounds: usize) -> anyhow::Result<()> {
    let l = model
        .layers
        .first()
        .ok_or_else(|| anyhow::anyhow!("the model has no layers"))?;
    let named = [
        ("head", model.head()),
        ("qkv", &l.wqkv),
        ("o", &l.wo),
        ("gate_up", &l.w_gate_up),
        ("down", &l.w_down),
    ];
    for (name, w) in named {
        for m in 4..=8 {
            let x: Vec<f32> = (0..m * w.cols())
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let mut q = Q8Rows::default();
            q.quantize(&x, w.cols());
            let acts = Acts {
                f32: &x,
                q8: Some(&q),
            };
            let mut out = vec![0f32; 8 * 16];
            let (mut one, mut split) = (Vec::new(), Vec::new());
            for _ in 0..rounds.min(10) {
                for (times, plan) in [
                    (&mut one, vec![(0, m)]),
                    (&mut split, vec![(0, m.min(4)), (4, m.saturating_sub(4))]),
                ] {
                    let started = Instant::now();
                    for start in (0..w.rows()).step_by(16) {
                        for &(m0, tile) in plan.iter().filter(|p| p.1 > 0) {
                            let rows = start..(start + 16).min(w.rows());
                            w.gemv_tile(
                                acts,
                                m0,
                                tile,
                                rows.clone(),
                                &mut out[..tile * rows.len()],
                            );
                        }
                    }
                    times.push(started.elapsed().as_secs_f64() * 1e3);
                }
            }
            println!(
                "{name} m={m}: one tile {:6.2} ms, tiles of <=4 rows {:6.2} ms",
                median(&mut one),
                median(&mut split)
            );
        }
    }
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
