//! `serve --tpot-target`: under 64 concurrent streams on the sim backend (a modelled step
//! time, slept: 20 ms a step plus 2 ms a sequence, so 64 streams at once would take 148 ms a
//! token), the engine holds the target's time per output token at p95 by running only the
//! sequences its measured step time allows, the rest wait, and its throughput is at least 90%
//! of the best any fixed `--max-num-seqs` reaches within the same target (a sweep here).
//! The step times are sleeps, so the figures hold on a loaded machine too.

mod tpot_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokenscale_common::perf_model::PerfProfile;
use tokenscale_engine::backend::Backend;
use tokenscale_engine::backend::sim::SimBackend;
use tokenscale_engine::runtime::{
    EngineConfig, EngineHandle, EngineMetrics, GenerateRequest, TokenEvent,
};
use tokenscale_engine::sampling::SamplingParams;
use tpot_support::{Measured, Sweep};

const STREAMS: usize = 64;
const OUTPUT_TOKENS: usize = 24;
const TARGET: Duration = Duration::from_millis(80);

const PROFILE: &str = "\
name: tpot-test
description: slow steps, so the batch sets the time per token
source: made for this test
gpus_per_replica: 1
step:
  t0_s: 0.020
  prefill_s_per_token: 0.0002
  decode_s_per_seq: 0.002
  kv_read_s_per_token: 0.0
kv:
  block_tokens: 16
  blocks: 4096
max_num_seqs: 256
max_batch_tokens: 2048
cold_start_s: 1
";

/// One run's figures and the running-set limit the engine exported at its end.
struct Run {
    measured: Measured,
    seat_limit: f64,
}

fn run(max_num_seqs: usize, tpot_target: Option<Duration>) -> Run {
    let profile = PerfProfile::from_yaml(PROFILE).expect("test profile");
    let backend = SimBackend::new(profile, 4096);
    let metrics = Arc::new(EngineMetrics::new(
        "tpot",
        "sim",
        true,
        backend.block_size(),
        backend.num_kv_blocks(),
    ));
    let config = EngineConfig {
        max_batch_tokens: 2048,
        max_num_seqs,
        enable_prefix_caching: false,
        max_model_len: 4096,
        eos_token_ids: Vec::new(),
        tpot_target,
        speculative: Default::default(),
    };
    let engine = EngineHandle::spawn(Box::new(backend), config, metrics.clone()).expect("spawn");
    let started = Instant::now();
    let streams: Vec<_> = (0..STREAMS)
        .map(|i| {
            // Distinct 32-token prompts: each costs a prefill.
            let request = GenerateRequest::new(
                (0..32).map(|t| 1000 + (i * 32 + t) as u32).collect(),
                SamplingParams {
                    max_tokens: Some(OUTPUT_TOKENS as u32),
                    ignore_eos: true,
                    ..SamplingParams::default()
                },
            );
            engine.submit(request).expect("submit")
        })
        .collect();
    let readers: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            std::thread::spawn(move || {
                let mut times = Vec::new();
                while let Some(event) = stream.blocking_next() {
                    match event {
                        TokenEvent::Token { .. } => times.push(Instant::now()),
                        TokenEvent::Finished { .. } => break,
                        TokenEvent::Failed(why) => panic!("request failed: {why}"),
                        TokenEvent::PromptLogprobs(_) => {}
                    }
                }
                times
            })
        })
        .collect();
    let times: Vec<Vec<Instant>> = readers
        .into_iter()
        .map(|reader| reader.join().expect("reader"))
        .collect();
    for t in &times {
        assert_eq!(t.len(), OUTPUT_TOKENS, "every stream gets its tokens");
    }
    Run {
        measured: Measured::from_streams(&times, started),
        seat_limit: metrics.max_num_seqs.get(),
    }
}

#[test]
fn the_engine_holds_its_tpot_target_at_the_best_throughput_a_fixed_cap_reaches() {
    let fixed: Vec<(usize, Measured)> = [8, 16, 24, 32, 48, 64]
        .into_iter()
        .map(|cap| (cap, run(cap, None).measured))
        .collect();
    let held = run(STREAMS, Some(TARGET));
    let sweep = Sweep {
        fixed: &fixed,
        target_s: TARGET.as_secs_f64(),
        held: &held.measured,
        note: format!("running-set limit at the end: {}", held.seat_limit),
    };
    sweep.assert_held(held.seat_limit < STREAMS as f64);
}

#[test]
fn without_a_target_the_configured_limit_is_exported() {
    let r = run(16, None);
    assert_eq!(r.seat_limit, 16.0);
}
