//! Shared set-up of the model tests: the real SmolLM2 model (fetched when missing — a missing
//! model fails the tests, never skips them) and a small driver that runs sequences through a
//! backend with hand-made block tables.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use tokenscale_engine::backend::cpu::{CpuBackend, CpuOptions, Precision};
use tokenscale_engine::backend::{Backend, SeqStep};
use tokenscale_engine::lora::LoraAdapter;
use tokenscale_engine::model::Model;

pub mod kquant;

pub const FIXTURE: &str = include_str!("../fixtures/smollm2-135m-instruct-q4_1.json");

/// The model, loaded once per test binary.
pub fn model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = tokenscale_engine::fetch::ensure_model("smollm2-135m")
                .expect("the test model is cached or can be fetched");
            let (_, model) = tokenscale_engine::model::load(&path).expect("the test model loads");
            Arc::new(model)
        })
        .clone()
}

/// A backend over the test model with `num_blocks` blocks of `block_size` slots.
pub fn backend(precision: Precision, num_blocks: usize, block_size: usize) -> CpuBackend {
    backend_for(model(), precision, num_blocks, block_size)
}

/// A backend over `model` with `num_blocks` blocks of `block_size` slots.
pub fn backend_for(
    model: Arc<Model>,
    precision: Precision,
    num_blocks: usize,
    block_size: usize,
) -> CpuBackend {
    CpuBackend::new(
        model,
        num_blocks,
        block_size,
        CpuOptions {
            precision,
            threads: 0,
        },
    )
    .expect("backend starts")
}

/// One golden case of the fixture.
pub struct Case {
    pub prompt_ids: Vec<u32>,
    pub greedy_ids: Vec<u32>,
    /// Per step: the reference's top-5 `(id, logit)`.
    pub top5: Vec<Vec<(u32, f64)>>,
}

/// The fixture's cases.
pub fn cases() -> Vec<Case> {
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    };
    fixture["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            prompt_ids: ids(&c["prompt_ids"]),
            greedy_ids: ids(&c["greedy_ids"]),
            top5: c["steps"]
                .as_array()
                .expect("steps")
                .iter()
                .map(|s| {
                    let logits = s["top5_logits"].as_array().expect("logits");
                    ids(&s["top5"])
                        .into_iter()
                        .zip(logits.iter().map(|l| l.as_f64().expect("logit")))
                        .collect()
                })
                .collect(),
        })
        .collect()
}

/// Teacher-forced run of one case: the prompt in one call, then the fixture's greedy tokens one
/// at a time; the logits of every step (`[steps][vocab]`).
pub fn forced_logits(backend: &mut CpuBackend, case: &Case, block_size: usize) -> Vec<Vec<f32>> {
    forced_logits_with(backend, case, block_size, None)
}

/// [`forced_logits`] with a LoRA adapter on the sequence (`None`: the base model).
pub fn forced_logits_with(
    backend: &mut CpuBackend,
    case: &Case,
    block_size: usize,
    adapter: Option<&LoraAdapter>,
) -> Vec<Vec<f32>> {
    let vocab = backend.model_config().vocab_size;
    let total = case.prompt_ids.len() + case.greedy_ids.len();
    let table: Vec<u32> = (0..total.div_ceil(block_size) as u32).collect();
    let mut tokens = case.prompt_ids.clone();
    let mut computed = 0;
    let mut out = Vec::new();
    for step in 0..case.greedy_ids.len() {
        let seq = SeqStep {
            tokens: &tokens[computed..],
            start_pos: computed,
            block_table: &table,
            want_logits: true,
        };
        let result = backend
            .forward_lora(&[seq], &[], &[adapter])
            .expect("forward runs");
        out.push(result.logits_of(0, vocab).expect("logits").to_vec());
        computed = tokens.len();
        tokens.push(case.greedy_ids[step]);
    }
    out
}

/// The reference path's rule: every greedy token of the golden vectors, and every top-5 logit
/// within 2e-2 of the float64 reference. `runs` holds each case's forced logits; returns the
/// largest top-5 error seen.
pub fn assert_reproduces_golden(cases: &[Case], runs: &[Vec<Vec<f32>>], what: &str) -> f64 {
    let mut worst = 0f64;
    for (c, (case, logits)) in cases.iter().zip(runs).enumerate() {
        for (step, (row, top5)) in logits.iter().zip(&case.top5).enumerate() {
            assert_eq!(
                argmax(row),
                case.greedy_ids[step],
                "{what}: case {c} step {step}: greedy token"
            );
            for &(id, want) in top5 {
                let err = (f64::from(row[id as usize]) - want).abs();
                worst = worst.max(err);
                assert!(
                    err < 2e-2,
                    "{what}: case {c} step {step} token {id}: logit {} vs {want}",
                    row[id as usize]
                );
            }
        }
    }
    worst
}

/// The golden margin rule: a run may pick another greedy token than the reference only where
/// the reference's top-1/top-2 margin is below `max_err` (the run's measured logit error).
/// Returns how many steps differ.
pub fn assert_flips_within(
    cases: &[Case],
    runs: &[Vec<Vec<f32>>],
    max_err: f32,
    what: &str,
) -> usize {
    let mut flips = 0;
    for (case, run) in cases.iter().zip(runs) {
        for (step, (row, top5)) in run.iter().zip(&case.top5).enumerate() {
            if argmax(row) != case.greedy_ids[step] {
                flips += 1;
                let margin = top5[0].1 - top5[1].1;
                assert!(
                    margin < f64::from(max_err),
                    "{what} picked {} over {} at a margin of {margin} > its error {max_err}",
                    argmax(row),
                    case.greedy_ids[step]
                );
            }
        }
    }
    flips
}

/// Index of the largest logit (lowest id on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// A sequence being decoded: its tokens so far and its block table.
pub struct Seq {
    pub tokens: Vec<u32>,
    pub computed: usize,
    pub block_table: Vec<u32>,
}

impl Seq {
    pub fn new(prompt: &[u32], block_table: Vec<u32>) -> Self {
        Self {
            tokens: prompt.to_vec(),
            computed: 0,
            block_table,
        }
    }

    /// The next step of this sequence: up to `chunk` uncomputed tokens.
    pub fn step(&self, chunk: usize) -> SeqStep<'_> {
        let end = self.computed.saturating_add(chunk).min(self.tokens.len());
        SeqStep {
            tokens: &self.tokens[self.computed..end],
            start_pos: self.computed,
            block_table: &self.block_table,
            want_logits: end == self.tokens.len(),
        }
    }
}

/// Runs `seqs` together (prompts in chunks of `chunk` tokens) until each has `new_tokens`
/// greedy tokens; returns every sequence's generated ids and last-step logits per generated
/// token.
pub fn run_greedy(
    backend: &mut CpuBackend,
    seqs: &mut [Seq],
    chunk: usize,
    new_tokens: usize,
) -> Vec<Vec<u32>> {
    run_greedy_with(backend, seqs, chunk, new_tokens, &[])
}

/// [`run_greedy`] with `adapters[i]` the LoRA adapter of `seqs[i]` (empty: none).
pub fn run_greedy_with(
    backend: &mut CpuBackend,
    seqs: &mut [Seq],
    chunk: usize,
    new_tokens: usize,
    adapters: &[Option<&LoraAdapter>],
) -> Vec<Vec<u32>> {
    let vocab = backend.model_config().vocab_size;
    let prompt_lens: Vec<usize> = seqs.iter().map(|s| s.tokens.len()).collect();
    loop {
        let active: Vec<usize> = (0..seqs.len())
            .filter(|&i| seqs[i].tokens.len() - prompt_lens[i] < new_tokens)
            .collect();
        if active.is_empty() {
            break;
        }
        let steps: Vec<SeqStep<'_>> = active.iter().map(|&i| seqs[i].step(chunk)).collect();
        let lens: Vec<usize> = steps.iter().map(|s| s.tokens.len()).collect();
        let step_adapters: Vec<Option<&LoraAdapter>> = active
            .iter()
            .map(|&i| adapters.get(i).copied().flatten())
            .collect();
        let out = backend
            .forward_lora(&steps, &[], &step_adapters)
            .expect("forward runs");
        let mut next = Vec::new();
        for (b, &i) in active.iter().enumerate() {
            next.push((i, lens[b], out.logits_of(b, vocab).map(argmax)));
        }
        for (i, len, token) in next {
            seqs[i].computed += len;
            if let Some(token) = token {
                seqs[i].tokens.push(token);
            }
        }
    }
    seqs.iter()
        .zip(&prompt_lens)
        .map(|(s, &p)| s.tokens[p..].to_vec())
        .collect()
}

/// A block table of `n` blocks taken from `first` with stride `stride` (interleaving several
/// sequences' blocks across the pool, as a real block pool would).
pub fn strided_table(first: u32, stride: u32, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| first + i * stride).collect()
}
