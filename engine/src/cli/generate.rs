//! `tokenscale-engine generate`: one prompt, one completion, on the CPU backend.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::backend::cpu::{CpuBackend, CpuOptions, Precision};
use crate::backend::{Backend, SeqStep};
use crate::sampling::{FinishReason, Sampler, SamplingParams, finish_on_token};
use crate::tokenizer::{ChatMessage, IncrementalDecoder};

/// Arguments of `generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// `hf://ORG/REPO[@REVISION][/FILE]`, a `.gguf` file, a checkpoint directory, or the
    /// test alias `smollm2-135m` (fetched on first use).
    #[arg(long, default_value = "smollm2-135m")]
    pub model: String,
    /// The prompt text.
    #[arg(long)]
    pub prompt: String,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: u32,
    /// Softmax temperature (0: greedy).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f32,
    /// Nucleus sampling threshold (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Seed of the sampler (same seed, same output).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run the f32 reference path instead of the quantised fast path.
    #[arg(long)]
    pub reference: bool,
    /// Print one JSON object (ids, text, timing) instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` output.
#[derive(Debug, Serialize)]
struct Generation {
    prompt_ids: Vec<u32>,
    generated_ids: Vec<u32>,
    text: String,
    finish_reason: &'static str,
    timing: Timing,
}

#[derive(Debug, Serialize)]
struct Timing {
    load_ms: f64,
    prefill_ms: f64,
    prefill_tokens_per_s: f64,
    decode_ms: f64,
    decode_tokens_per_s: f64,
}

const BLOCK_SIZE: usize = 16;

/// Runs `generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let load_start = Instant::now();
    eprintln!("model {}: locating (fetching on first use)…", args.model);
    let path =
        crate::fetch::ensure_model(&args.model).with_context(|| format!("model {}", args.model))?;
    eprintln!("loading {}…", path.display());
    let (checkpoint, model) = crate::model::load(&path)?;
    let tokenizer = checkpoint.tokenizer().context("tokenizer")?;
    drop(checkpoint);
    let prompt_ids = if args.chat {
        tokenizer.encode_chat(&[ChatMessage::new("user", args.prompt.as_str())], true)?
    } else {
        tokenizer.encode(&args.prompt, true)?
    };
    anyhow::ensure!(!prompt_ids.is_empty(), "the prompt encodes to no tokens");
    let config = model.config.clone();
    let total = (prompt_ids.len() + args.max_tokens as usize).min(config.context_length);
    anyhow::ensure!(
        prompt_ids.len() < config.context_length,
        "the prompt fills the context of {}",
        config.context_length
    );
    let precision = if args.reference {
        Precision::Reference
    } else {
        Precision::Fast
    };
    let mut backend = CpuBackend::new(
        Arc::new(model),
        total.div_ceil(BLOCK_SIZE),
        BLOCK_SIZE,
        CpuOptions {
            precision,
            threads: 0,
        },
    )?;
    let load_ms = load_start.elapsed().as_secs_f64() * 1e3;

    let params = SamplingParams {
        temperature: args.temperature,
        top_p: args.top_p,
        seed: args.seed,
        max_tokens: Some(args.max_tokens),
        ..SamplingParams::default()
    };
    params.validate(config.vocab_size)?;
    let mut sampler = Sampler::new(&params, &prompt_ids);
    let mut decoder = IncrementalDecoder::new(true);
    let block_table: Vec<u32> = (0..total.div_ceil(BLOCK_SIZE) as u32).collect();
    let mut tokens = prompt_ids.clone();
    let (mut text, mut generated) = (String::new(), Vec::new());
    let mut finish = FinishReason::Length;
    let (mut prefill_s, mut decode_s, mut computed) = (0.0, 0.0, 0);
    let mut stdout = std::io::stdout();
    while tokens.len() < total && args.max_tokens > 0 {
        let start = Instant::now();
        let step = SeqStep {
            tokens: &tokens[computed..],
            start_pos: computed,
            block_table: &block_table,
            want_logits: true,
        };
        let out = backend.forward(&[step])?;
        let logits = out
            .logits_of(0, config.vocab_size)
            .context("the backend returned no logits")?;
        let token = sampler.sample(logits)?.token_id;
        match computed {
            0 => prefill_s += start.elapsed().as_secs_f64(),
            _ => decode_s += start.elapsed().as_secs_f64(),
        }
        computed = tokens.len();
        tokens.push(token);
        generated.push(token);
        let stop = finish_on_token(
            &params,
            token,
            generated.len() as u32,
            tokenizer.eos_token_ids(),
        );
        if !matches!(stop, Some(FinishReason::Eos | FinishReason::StopToken(_))) {
            let piece = decoder.push(&tokenizer, token)?;
            if !args.json {
                write!(stdout, "{piece}")?;
                stdout.flush()?;
            }
            text.push_str(&piece);
        }
        if let Some(reason) = stop {
            finish = reason;
            break;
        }
    }
    let tail = decoder.finish();
    text.push_str(&tail);
    let decoded = generated.len().saturating_sub(1);
    let timing = Timing {
        load_ms,
        prefill_ms: prefill_s * 1e3,
        prefill_tokens_per_s: prompt_ids.len() as f64 / prefill_s.max(1e-9),
        decode_ms: decode_s * 1e3,
        decode_tokens_per_s: if decoded == 0 {
            0.0
        } else {
            decoded as f64 / decode_s.max(1e-9)
        },
    };
    if args.json {
        let out = Generation {
            prompt_ids,
            generated_ids: generated,
            text,
            finish_reason: finish.as_openai(),
            timing,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("{tail}");
        eprintln!(
            "[{} prompt tokens at {:.1} tokens/s, {} generated at {:.1} tokens/s]",
            prompt_ids.len(),
            timing.prefill_tokens_per_s,
            generated.len(),
            timing.decode_tokens_per_s
        );
    }
    Ok(())
}
