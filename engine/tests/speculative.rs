//! Speculative decoding on the real test model, through the engine loop as `serve` runs it
//! (the fast CPU path): n-gram drafts verified in one batched step give token for token what
//! plain decoding gives, greedy on the golden prompts and on 20 long repetitive prompts, and
//! seeded sampling at temperature 1 (top-p, penalties, logit bias) too, since each kept token
//! is the same seeded draw from the same distribution. The drafts really ran: the acceptance
//! counters say so, and rejected positions were rolled back (the answers would differ if not).

mod common;

use std::sync::Arc;

use tokenscale_engine::backend::Backend;
use tokenscale_engine::backend::cpu::Precision;
use tokenscale_engine::runtime::{
    EngineConfig, EngineHandle, EngineMetrics, GenerateRequest, TokenEvent,
};
use tokenscale_engine::sampling::SamplingParams;
use tokenscale_engine::spec::{SpeculativeConfig, SpeculativeMode};

const BLOCK_SIZE: usize = 16;

/// An engine on the test model with speculation set to `mode`.
fn engine(mode: SpeculativeMode) -> EngineHandle {
    let backend = common::backend(Precision::Fast, 1024, BLOCK_SIZE);
    let metrics = Arc::new(EngineMetrics::new(
        "spec",
        "cpu",
        false,
        backend.block_size(),
        backend.num_kv_blocks(),
    ));
    let config = EngineConfig {
        max_batch_tokens: 512,
        max_num_seqs: 8,
        enable_prefix_caching: true,
        max_model_len: 2048,
        eos_token_ids: Vec::new(),
        tpot_target: None,
        speculative: SpeculativeConfig {
            mode,
            ..SpeculativeConfig::default()
        },
    };
    EngineHandle::spawn(Box::new(backend), config, metrics).expect("engine starts")
}

/// The tokens of each prompt, all submitted at once (so verify steps share batches with
/// plain decodes and prefill chunks).
fn generate(engine: &EngineHandle, prompts: &[Vec<u32>], params: &SamplingParams) -> Vec<Vec<u32>> {
    let streams: Vec<_> = prompts
        .iter()
        .map(|prompt| {
            let request = GenerateRequest::new(prompt.clone(), params.clone());
            engine.submit(request).expect("submit")
        })
        .collect();
    streams
        .into_iter()
        .map(|mut stream| {
            let mut tokens = Vec::new();
            while let Some(event) = stream.blocking_next() {
                match event {
                    TokenEvent::Token { token, .. } => tokens.push(token.token_id),
                    TokenEvent::Finished { .. } => break,
                    TokenEvent::Failed(why) => panic!("request failed: {why}"),
                    TokenEvent::PromptLogprobs(_) => {}
                }
            }
            tokens
        })
        .collect()
}

/// 20 long prompts that invite copying: golden prompts strung together, with one of them
/// repeated at the end (a "rewrite this text" shape).
fn long_prompts() -> Vec<Vec<u32>> {
    let cases = common::cases();
    (0..20)
        .map(|i| {
            let mut prompt = Vec::new();
            for j in 0..3 {
                prompt.extend(&cases[(i + j) % cases.len()].prompt_ids);
            }
            let copied = &cases[i % cases.len()].prompt_ids;
            prompt.extend(&copied[..copied.len() * (1 + i % 3) / 3]);
            prompt
        })
        .collect()
}

/// Runs `prompts` plainly and speculatively; asserts the same tokens and returns the drafts
/// verified and draft tokens accepted.
fn same_with_and_without(prompts: &[Vec<u32>], params: &SamplingParams) -> (u64, u64) {
    let plain = generate(&engine(SpeculativeMode::Off), prompts, params);
    let spec_engine = engine(SpeculativeMode::Ngram);
    let spec = generate(&spec_engine, prompts, params);
    for (i, (p, s)) in plain.iter().zip(&spec).enumerate() {
        assert_eq!(p, s, "prompt {i}: speculative decoding changed the tokens");
    }
    let m = &spec_engine.metrics().spec_decode;
    (m.num_drafts.get(), m.num_accepted_tokens.get())
}

#[test]
fn greedy_speculation_gives_the_plain_tokens_on_the_golden_and_long_prompts() {
    let params = SamplingParams {
        max_tokens: Some(48),
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let golden: Vec<Vec<u32>> = common::cases().into_iter().map(|c| c.prompt_ids).collect();
    let (drafts, accepted) = same_with_and_without(&golden, &params);
    assert!(drafts > 0, "the golden prompts drafted nothing");
    let (drafts, accepted_long) = same_with_and_without(&long_prompts(), &params);
    assert!(
        drafts > 0 && accepted + accepted_long > 0,
        "no draft token was accepted"
    );
}

#[test]
fn seeded_sampling_at_temperature_one_gives_the_plain_tokens() {
    let params = SamplingParams {
        max_tokens: Some(40),
        ignore_eos: true,
        temperature: 1.0,
        top_p: 0.95,
        presence_penalty: 0.3,
        logit_bias: [(28, 1.5)].into_iter().collect(),
        seed: Some(7),
        ..SamplingParams::default()
    };
    let (drafts, _) = same_with_and_without(&long_prompts()[..8], &params);
    assert!(drafts > 0, "no draft was verified");
}
