//! What speculative decoding buys one stream on a repetitive task: decode tokens/s of a single
//! greedy stream with n-gram drafts against the same stream without (`"speculative": false`
//! on the same engine), in interleaved rounds, on two tasks that copy from the prompt
//! (rewrite a given text; extract its quoted lines). Both give the same tokens (checked), so
//! the rounds are comparable. Prints, never asserts: the machine may be shared.
//!
//! `cargo run --release -p tokenscale-engine --example spec_bench -- [ROUNDS] [TOKENS] [MODE]
//! [STREAMS]` (MODE: `auto`, the default, or `ngram`; STREAMS: 1, or more at once to see what
//! speculation does to a batch: aggregate decode tokens/s).

use std::time::Instant;

use tokenscale_engine::runtime::{GenerateRequest, TokenEvent};
use tokenscale_engine::sampling::SamplingParams;
use tokenscale_engine::server::{LoadedModel, ServeConfig, load_model};
use tokenscale_engine::spec::SpeculativeConfig;
use tokenscale_engine::tokenizer::ChatMessage;

const TEXT: &str = "The harbour town woke slowly. \"Bring the nets in before noon,\" said the \
old fisherman to his son. The boy nodded and ran down to the boats, where the gulls were \
already circling. At the market, the baker called out, \"Fresh bread, still warm from the \
oven!\" and a queue formed at once. By midday the wind had turned, and the harbour master \
shouted, \"Every boat stays in today.\" Nobody argued; they had all seen the clouds gather \
over the hills. In the evening the son asked, \"Will we go out tomorrow?\" and his father \
answered, \"If the sea lets us, we will.\"";

const TASKS: [(&str, &str); 2] = [
    (
        "rewrite",
        "Rewrite the following text word for word, keeping every sentence:",
    ),
    (
        "quotes",
        "Extract every quoted line from the following text, one per line, with the quotes:",
    ),
];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).map_or(Ok(4), |a| a.parse())?;
    let tokens: u32 = args.get(2).map_or(Ok(160), |a| a.parse())?;
    let mode = args.get(3).map_or("auto", String::as_str);
    let streams: usize = args.get(4).map_or(Ok(1), |a| a.parse())?;
    let config = ServeConfig {
        speculative: SpeculativeConfig {
            mode: mode.parse().map_err(anyhow::Error::msg)?,
            ..SpeculativeConfig::default()
        },
        ..ServeConfig::default()
    };
    let model = load_model(&config)?;
    println!(
        "--speculative {mode}, {rounds} rounds, up to {tokens} tokens, greedy, {streams} stream(s)"
    );
    for (name, instruction) in TASKS {
        let message = format!("{instruction}\n\n{TEXT}");
        let prompt = model
            .tokenizer
            .encode_chat(&[ChatMessage::new("user", &message)], true)?;
        run(&model, &prompt, tokens, true, streams)?; // warm-up (and the step-time model's fit)
        let (mut plain, mut spec) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternate which goes first, so drift in the machine's load hits both alike.
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            let mut outputs = Vec::new();
            for speculative in order {
                let (tps, output) = run(&model, &prompt, tokens, speculative, streams)?;
                println!(
                    "{name} round {round} {:>11}: {tps:6.1} tokens/s ({} tokens)",
                    if speculative { "speculative" } else { "plain" },
                    output.len()
                );
                if speculative {
                    spec.push(tps)
                } else {
                    plain.push(tps)
                }
                outputs.push(output);
            }
            anyhow::ensure!(
                outputs[0] == outputs[1],
                "the two runs gave different tokens"
            );
        }
        let (p, s) = (median(&mut plain), median(&mut spec));
        println!(
            "{name}: plain {p:.1} tokens/s, speculative {s:.1} tokens/s, ratio {:.2} (medians)",
            s / p
        );
    }
    let m = &model.engine.metrics().spec_decode;
    let (drafted, accepted) = (m.num_draft_tokens.get(), m.num_accepted_tokens.get());
    println!(
        "drafts {}, draft tokens {drafted}, accepted {accepted} ({:.0}%)",
        m.num_drafts.get(),
        100.0 * accepted as f64 / drafted.max(1) as f64
    );
    Ok(())
}

/// `streams` greedy streams of `prompt` at once: their decode tokens/s together (first token
/// to last) and the first stream's tokens.
fn run(
    model: &LoadedModel,
    prompt: &[u32],
    tokens: u32,
    speculative: bool,
    streams: usize,
) -> anyhow::Result<(f64, Vec<u32>)> {
    let params = SamplingParams {
        max_tokens: Some(tokens),
        speculative,
        ..SamplingParams::greedy()
    };
    let mut pending = Vec::with_capacity(streams);
    for _ in 0..streams.max(1) {
        let request = GenerateRequest::new(prompt.to_vec(), params.clone());
        pending.push(model.engine.submit(request)?);
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
                    output.push(token.token_id);
                }
                TokenEvent::Finished { .. } => break,
                TokenEvent::Failed(why) => anyhow::bail!("request failed: {why}"),
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
    Ok((tps, outputs.swap_remove(0)))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
