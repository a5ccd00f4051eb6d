//! Drafting strategies replayed on the plain greedy output of the speculative tasks: at
//! temperature 0 a verify step keeps exactly the draft's common prefix with the plain output,
//! so what a drafter and length policy would give is known without running them: tokens per
//! verify step, draft rows, and a modelled speed-up over a step-time table by draft rows (from
//! `verify_cost`). Deterministic: no timing noise. Prints, never asserts.
//!
//! `cargo run --release -p tokenscale-engine --example spec_replay -- [TOKENS] [STEP_MS...]`
//! (STEP_MS: a plain step's time, then with 1, 2, … draft rows, 1 ms a row past the last;
//! default: one measured table)

use tokenscale_engine::backend::cuda::check::speculative::run_streams;
use tokenscale_engine::server::{ServeConfig, load_model};
use tokenscale_engine::spec::tasks::{TASKS, message};
use tokenscale_engine::spec::{DraftPolicy, Lookup, SpeculativeMode, StepCost, lookup};
use tokenscale_engine::tokenizer::ChatMessage;

/// A one-stream step's time by draft rows (ms): as the engine measured it in commit 1cc074f
/// (7.0 plain, 10.0 with 3 draft rows, 14.3 with 4), 1 ms a row elsewhere.
const DEFAULT_MS: [f64; 9] = [7.0, 8.0, 9.0, 10.0, 14.3, 15.3, 16.3, 17.3, 18.3];

type Drafter = dyn Fn(&[u32], usize) -> Option<Lookup>;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let tokens: u32 = args.get(1).map_or(Ok(160), |a| a.parse())?;
    let ms: Vec<f64> = match args.get(2..).filter(|a| !a.is_empty()) {
        Some(list) => list.iter().map(|a| a.parse()).collect::<Result<_, _>>()?,
        None => DEFAULT_MS.to_vec(),
    };
    let config = ServeConfig::default();
    let model = load_model(&config)?;
    // (shortest match, longest match, most draft tokens): the old defaults, the new ones,
    // and around them.
    let configs = [
        (2, 4, 4),
        (2, 8, 8),
        (1, 8, 8),
        (2, 16, 8),
        (2, 8, 16),
        (2, 16, 16),
    ];
    for (name, instruction) in TASKS {
        let prompt = model
            .tokenizer
            .encode_chat(&[ChatMessage::new("user", message(instruction))], true)?;
        let (_, mut answers) = run_streams(&model.engine, &prompt, (tokens, false), false, 1)?;
        let output: Vec<u32> = answers.swap_remove(0).iter().map(|t| t.token_id).collect();
        println!("== {name}: {} tokens", output.len());
        println!("{}", model.tokenizer.decode(&output, true)?);
        for (min_n, max_n, k_max) in configs {
            let drafter = move |t: &[u32], k| lookup(t, min_n, max_n, k);
            let policy = replay(&prompt, &output, &drafter, k_max, &ms, Length::Policy);
            let oracle = replay(&prompt, &output, &drafter, k_max, &ms, Length::Oracle);
            println!(
                "{name:<8} n {min_n}..{max_n:<2} k<={k_max:<2}: policy {policy}; oracle length {oracle}"
            );
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Length {
    /// The engine's policy (acceptance per match length, the step-time table as measured).
    Policy,
    /// The length that would be kept in full (an upper bound for this drafter).
    Oracle,
}

struct Outcome {
    steps: usize,
    tokens: usize,
    drafted: usize,
    accepted: usize,
    speedup: f64,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} tokens/step, {} drafted, {} kept, model {:.2}x",
            self.tokens as f64 / self.steps.max(1) as f64,
            self.drafted,
            self.accepted,
            self.speedup
        )
    }
}

fn replay(
    prompt: &[u32],
    output: &[u32],
    drafter: &Drafter,
    k_max: usize,
    ms: &[f64],
    length: Length,
) -> Outcome {
    let step_ms = |k: usize| {
        ms.get(k)
            .copied()
            .unwrap_or_else(|| ms[ms.len() - 1] + (k + 1 - ms.len()) as f64)
    };
    let cost = StepCost {
        step_s: step_ms(0) / 1e3,
        per_token_s: (step_ms(1) - step_ms(0)) / 1e3,
        running: 1,
        extra_s: std::array::from_fn(|i| Some((step_ms(i + 1) - step_ms(0)) / 1e3)),
        plain_measured: true,
    };
    let mut policy = DraftPolicy::default();
    let mut seq: Vec<u32> = prompt.to_vec();
    let (mut pos, mut steps, mut drafted, mut accepted, mut time) = (1, 0, 0, 0, 0.0);
    // The first token comes from the prompt's step (not counted, as spec_bench does).
    seq.push(output[0]);
    while pos < output.len() {
        let max_k = k_max.min(output.len() - pos - 1);
        let found = (max_k > 0).then(|| drafter(&seq, max_k)).flatten();
        let mut draft = Vec::new();
        if let Some(found) = found {
            let k = match length {
                Length::Policy => policy.length(found.n, SpeculativeMode::Auto, max_k, Some(cost)),
                Length::Oracle => common(&found.tokens, &output[pos..]),
            };
            if k == 0 {
                policy.set_shadow(found.tokens.first().map(|&t| (t, found.n)));
            } else {
                policy.drafting(found.n);
                draft = found.tokens[..k.min(found.tokens.len())].to_vec();
            }
        }
        let kept = common(&draft, &output[pos..]);
        if !draft.is_empty() {
            policy.record(draft.len(), kept);
        } else {
            policy.on_token(output[pos]);
        }
        steps += 1;
        drafted += draft.len();
        accepted += kept;
        time += step_ms(draft.len());
        let advance = (kept + 1).min(output.len() - pos);
        seq.extend_from_slice(&output[pos..pos + advance]);
        pos += advance;
    }
    let tokens = output.len() - 1;
    Outcome {
        steps,
        tokens,
        drafted,
        accepted,
        speedup: tokens as f64 * step_ms(0) / time.max(1e-9),
    }
}

fn common(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
