//! What speculative decoding buys one stream on a repetitive task: decode tokens/s of a single
//! greedy stream with n-gram drafts against the same stream without (`"speculative": false`
//! on the same engine), in interleaved rounds, on two tasks that copy from the prompt
//! (rewrite a given text; extract its quoted lines). Both give the same tokens (checked), so
//! the rounds are comparable. Prints, never asserts: the machine may be shared.
//!
//! `cargo run --release -p tokenscale-engine --example spec_bench -- [ROUNDS] [TOKENS] [MODE]
//! [STREAMS] [K] [MAX_N]` (MODE: `auto`, the default, or `ngram`; STREAMS: 1, or more at once to
//! see what speculation does to a batch: aggregate decode tokens/s; K and MAX_N:
//! `--num-speculative-tokens` and `--prompt-lookup-max`, the defaults when left out).

use tokenscale_engine::backend::cuda::check::speculative::run_streams;
use tokenscale_engine::server::{ServeConfig, load_model};
use tokenscale_engine::spec::SpeculativeConfig;
use tokenscale_engine::spec::tasks::{TASKS, message};
use tokenscale_engine::tokenizer::ChatMessage;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).map_or(Ok(4), |a| a.parse())?;
    let tokens: u32 = args.get(2).map_or(Ok(160), |a| a.parse())?;
    let mode = args.get(3).map_or("auto", String::as_str);
    let streams: usize = args.get(4).map_or(Ok(1), |a| a.parse())?;
    let defaults = SpeculativeConfig::default();
    let speculative = SpeculativeConfig {
        mode: mode.parse().map_err(anyhow::Error::msg)?,
        num_speculative_tokens: args
            .get(5)
            .map_or(Ok(defaults.num_speculative_tokens), |a| a.parse())?,
        prompt_lookup_max: args
            .get(6)
            .map_or(Ok(defaults.prompt_lookup_max), |a| a.parse())?,
        ..defaults
    };
    speculative.validate().map_err(anyhow::Error::msg)?;
    let config = ServeConfig {
        speculative,
        ..ServeConfig::default()
    };
    let model = load_model(&config)?;
    println!(
        "--speculative {mode}, k {}, n {}..{}, {rounds} rounds, up to {tokens} tokens, greedy, \
         {streams} stream(s)",
        speculative.num_speculative_tokens,
        speculative.prompt_lookup_min,
        speculative.prompt_lookup_max
    );
    for (name, instruction) in TASKS {
        let prompt = model
            .tokenizer
            .encode_chat(&[ChatMessage::new("user", message(instruction))], true)?;
        run_streams(&model.engine, &prompt, (tokens, false), true, streams)?; // warm-up (and the step-time model's fit)
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
                let (tps, mut answers) = run_streams(
                    &model.engine,
                    &prompt,
                    (tokens, false),
                    speculative,
                    streams,
                )?;
                let output: Vec<u32> = answers.swap_remove(0).iter().map(|t| t.token_id).collect();
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

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
