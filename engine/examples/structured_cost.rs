//! What constrained decoding costs: decode tokens/s of 32 sequences with a JSON schema against
//! 32 without, on the real model through the engine loop (mask worker, sampler), in alternating
//! rounds of the same run. Both kinds generate exactly `--tokens` tokens per sequence (the
//! schema asks for a long array, the free ones ignore EOS), so the rounds are comparable.
//!
//! `cargo run -p tokenscale-engine --example structured_cost -- [ROUNDS] [TOKENS] [MODEL]`

use std::time::Instant;

use serde_json::json;
use tokenscale_engine::grammar::Grammar;
use tokenscale_engine::runtime::{GenerateRequest, TokenEvent};
use tokenscale_engine::sampling::SamplingParams;
use tokenscale_engine::sched::Priority;
use tokenscale_engine::server::{LoadedModel, ServeConfig, load_model};
use tokenscale_engine::tokenizer::ChatMessage;

const SEQS: usize = 32;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).map_or(Ok(3), |a| a.parse())?;
    let tokens: u32 = args.get(2).map_or(Ok(96), |a| a.parse())?;
    let model_name = args
        .get(3)
        .cloned()
        .unwrap_or_else(|| "smollm2-135m".into());
    let config = ServeConfig {
        model: model_name,
        kv_cache_tokens: 32 * 1024,
        max_num_seqs: SEQS,
        max_batch_tokens: 1024,
        ..ServeConfig::default()
    };
    let model = load_model(&config)?;
    let prompt = model.tokenizer.encode_chat(
        &[ChatMessage::new(
            "user",
            "List people you know, with a score for each, as JSON.",
        )],
        true,
    )?;
    let schema = json!({"type": "object", "properties": {"people": {"type": "array",
        "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
            "score": {"type": "integer"}}, "required": ["name", "score"]}, "minItems": 1000}},
        "required": ["people"]});
    let grammar = Grammar::JsonSchema {
        schema,
        param: "response_format".into(),
    };
    let compiler = model.grammar.get().map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    compiler.compile(&grammar)?;
    println!(
        "grammar vocabulary built and schema compiled in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!("load before: {}", loadavg());
    let mut free = Vec::new();
    let mut constrained = Vec::new();
    run_round(&model, &prompt, tokens, None)?; // warm-up
    for round in 0..rounds {
        // Alternate which kind goes first, so drift in the machine's load hits both alike.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for with_schema in order {
            let constraint = with_schema
                .then(|| compiler.compile(&grammar))
                .transpose()?;
            let tps = run_round(&model, &prompt, tokens, constraint)?;
            let kind = if with_schema { "json_schema" } else { "free" };
            println!("round {round} {kind:>11}: {tps:7.1} tokens/s");
            if with_schema {
                constrained.push(tps)
            } else {
                free.push(tps)
            }
        }
    }
    println!("load after: {}", loadavg());
    let (f, c) = (median(&mut free), median(&mut constrained));
    println!(
        "{SEQS} sequences x {tokens} tokens: free {f:.1} tokens/s, json_schema {c:.1} tokens/s, ratio {:.3} (medians of {rounds})",
        c / f
    );
    Ok(())
}

/// Runs `SEQS` sequences to `tokens` tokens each; aggregate decode tokens/s.
fn run_round(
    model: &LoadedModel,
    prompt: &[u32],
    tokens: u32,
    constraint: Option<tokenscale_engine::grammar::Constraint>,
) -> anyhow::Result<f64> {
    let params = SamplingParams {
        temperature: 0.8,
        seed: Some(1),
        max_tokens: Some(tokens),
        ignore_eos: constraint.is_none(),
        ..SamplingParams::default()
    };
    let started = Instant::now();
    let mut streams = Vec::new();
    for i in 0..SEQS {
        let mut params = params.clone();
        params.seed = Some(i as u64);
        streams.push(model.engine.submit(GenerateRequest {
            prompt_tokens: prompt.to_vec(),
            params,
            priority: Priority::Interactive,
            cache_salt: None,
            arrival: Instant::now(),
            resumed_tokens: 0,
            constraint: constraint.clone(),
            adapter: None,
        })?);
    }
    let mut generated = 0usize;
    for stream in &mut streams {
        loop {
            match stream.blocking_next() {
                Some(TokenEvent::Token { .. }) => generated += 1,
                Some(TokenEvent::Finished { .. }) | None => break,
                Some(TokenEvent::Failed(e)) => anyhow::bail!("a request failed: {e}"),
                // Only requests that ask for prompt logprobs get them; these do not.
                Some(TokenEvent::PromptLogprobs(_)) => {}
            }
        }
    }
    Ok(generated as f64 / started.elapsed().as_secs_f64())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
