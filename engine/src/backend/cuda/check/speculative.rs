//! The GPU check's speculative decoding case (`cuda-check --speculative`): the repetitive
//! tasks (`spec::tasks`) decoded greedily by one engine with `--speculative ngram`, each once
//! with drafts and once without (`"speculative": false`), alone and as a batch of streams, so
//! verify chunks run beside plain decode rows. With drafts the tokens must be those without;
//! a flip is excused only where the plain run's top-1/top-2 logprob margin is below
//! [`FLIP_MARGIN`] (a verify chunk runs through the chunk attention kernel, plain decoding
//! through the decode kernel: bf16 rounding may differ there). Prints the acceptance. Runs on
//! the CPU backend too (`--backend cpu`: the dry run's plumbing, where tokens must match).

use std::time::Instant;

use anyhow::{Context, bail};

use crate::runtime::{EngineHandle, GenerateRequest, TokenEvent};
use crate::sampling::{SampledToken, SamplingParams};
use crate::server::{ServeConfig, load_model};
use crate::spec::tasks::{TASKS, message};
use crate::spec::{SpeculativeConfig, SpeculativeMode};
use crate::tokenizer::ChatMessage;

/// Tokens each stream decodes.
const TOKENS: u32 = 64;
/// Streams of the batched case.
const BATCH: usize = 8;
/// Largest top-1/top-2 logprob margin at which a flip is rounding, not a wrong verify step.
pub const FLIP_MARGIN: f32 = 0.05;

/// One task at one batch size.
#[derive(Debug, Clone)]
pub struct SpecCase {
    pub task: &'static str,
    pub streams: usize,
    /// Tokens compared (every stream's).
    pub tokens: usize,
    /// First position where a stream differed, and the plain run's margin there.
    pub first_flip: Option<(usize, f32)>,
    pub plain_tps: f64,
    pub spec_tps: f64,
    pub drafted: u64,
    pub accepted: u64,
    pub pass: bool,
}

/// Runs every case on `model` (the CUDA backend unless `cpu`).
pub fn run(model: &str, cpu: bool) -> anyhow::Result<Vec<SpecCase>> {
    let config = ServeConfig {
        model: model.to_string(),
        use_cuda: !cpu,
        speculative: SpeculativeConfig {
            mode: SpeculativeMode::Ngram,
            ..SpeculativeConfig::default()
        },
        ..ServeConfig::default()
    };
    let loaded = load_model(&config).context("loading the model")?;
    let engine = &loaded.engine;
    let mut cases = Vec::new();
    for (task, instruction) in TASKS {
        let prompt = loaded
            .tokenizer
            .encode_chat(&[ChatMessage::new("user", message(instruction))], true)?;
        // Warm-up: kernels loaded, graphs captured, the step-time model fitted.
        run_streams(engine, &prompt, (TOKENS, true), false, 1)?;
        for streams in [1, BATCH] {
            let (plain_tps, plain) = run_streams(engine, &prompt, (TOKENS, true), false, streams)?;
            let m = &engine.metrics().spec_decode;
            let before = (m.num_draft_tokens.get(), m.num_accepted_tokens.get());
            let (spec_tps, spec) = run_streams(engine, &prompt, (TOKENS, true), true, streams)?;
            let drafted = m.num_draft_tokens.get() - before.0;
            let accepted = m.num_accepted_tokens.get() - before.1;
            let first_flip = plain
                .iter()
                .zip(&spec)
                .filter_map(|(p, s)| first_flip(p, s))
                .min_by_key(|f| f.0);
            let excused = first_flip.is_none_or(|(_, margin)| !cpu && margin < FLIP_MARGIN);
            cases.push(SpecCase {
                task,
                streams,
                tokens: plain.iter().map(Vec::len).sum(),
                first_flip,
                plain_tps,
                spec_tps,
                drafted,
                accepted,
                pass: excused && drafted > 0,
            });
        }
    }
    Ok(cases)
}

/// Where `spec` first leaves `plain` (a length difference counts), with the plain run's
/// top-1/top-2 margin there (∞ when it has no alternatives).
fn first_flip(plain: &[SampledToken], spec: &[SampledToken]) -> Option<(usize, f32)> {
    let i = (0..plain.len().max(spec.len()))
        .find(|&i| plain.get(i).map(|t| t.token_id) != spec.get(i).map(|t| t.token_id))?;
    let margin = plain
        .get(i)
        .map_or(f32::INFINITY, |t| match &t.top_logprobs[..] {
            [a, b, ..] => a.logprob - b.logprob,
            _ => f32::INFINITY,
        });
    Some((i, margin))
}

/// `streams` greedy streams of `prompt` at once (with each token's top-2 logprobs when
/// `logprobs`): their decode tokens/s together (first token to last) and every stream's
/// tokens.
pub fn run_streams(
    engine: &EngineHandle,
    prompt: &[u32],
    (tokens, logprobs): (u32, bool),
    speculative: bool,
    streams: usize,
) -> anyhow::Result<(f64, Vec<Vec<SampledToken>>)> {
    let params = SamplingParams {
        max_tokens: Some(tokens),
        speculative,
        logprobs: logprobs.then_some(2),
        ..SamplingParams::greedy()
    };
    let mut pending = Vec::with_capacity(streams);
    for _ in 0..streams.max(1) {
        let request = GenerateRequest::new(prompt.to_vec(), params.clone());
        pending.push(engine.submit(request)?);
    }
    let (mut first, mut last, mut outputs) = (None::<Instant>, None::<Instant>, Vec::new());
    for mut stream in pending {
        let mut output = Vec::new();
        while let Some(event) = stream.blocking_next() {
            match event {
                TokenEvent::Token { token, .. } => {
                    let now = Instant::now();
                    // Read one stream after another: the earliest first token is the first.
                    first = Some(first.map_or(now, |f| f.min(now)));
                    last = Some(last.map_or(now, |l| l.max(now)));
                    output.push(token);
                }
                TokenEvent::Finished { .. } => break,
                TokenEvent::Failed(why) => bail!("request failed: {why}"),
                TokenEvent::PromptLogprobs(_) => {}
            }
        }
        outputs.push(output);
    }
    let total: usize = outputs.iter().map(Vec::len).sum();
    let span = match (first, last) {
        (Some(f), Some(l)) => (l - f).as_secs_f64(),
        _ => 0.0,
    };
    let tps = total.saturating_sub(outputs.len()) as f64 / span.max(1e-9);
    Ok((tps, outputs))
}

/// The cases as a table.
pub fn table(cases: &[SpecCase]) -> String {
    let mut out = format!(
        "{:<8} {:>7} {:>7} {:>12} {:>10} {:>10} {:>6} {:>9} {:>9}  result\n",
        "task",
        "streams",
        "tokens",
        "first flip",
        "plain t/s",
        "spec t/s",
        "ratio",
        "drafted",
        "accepted"
    );
    for c in cases {
        let flip = c
            .first_flip
            .map_or("none".to_string(), |(i, m)| format!("{i} ({m:.3})"));
        out += &format!(
            "{:<8} {:>7} {:>7} {:>12} {:>10.1} {:>10.1} {:>6.2} {:>9} {:>8.0}%  {}\n",
            c.task,
            c.streams,
            c.tokens,
            flip,
            c.plain_tps,
            c.spec_tps,
            c.spec_tps / c.plain_tps.max(1e-9),
            c.drafted,
            100.0 * c.accepted as f64 / c.drafted.max(1) as f64,
            verdict(c)
        );
    }
    out
}

fn verdict(c: &SpecCase) -> &'static str {
    match (c.pass, c.first_flip.is_some(), c.drafted > 0) {
        (true, false, _) => "identical",
        (true, true, _) => "ok (a flip within the margin)",
        (false, _, false) => "FAIL (no draft ran)",
        (false, _, true) => "FAIL (tokens differ)",
    }
}
