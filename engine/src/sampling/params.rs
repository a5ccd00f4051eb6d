//! What a request asks of the sampler, and the checks that turn out-of-range values into typed
//! errors (the server answers them with HTTP 400 naming the parameter).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Largest accepted temperature (the OpenAI API's limit).
pub const MAX_TEMPERATURE: f32 = 2.0;
/// Largest accepted repetition penalty; above it the penalty only produces nonsense.
pub const MAX_REPETITION_PENALTY: f32 = 10.0;
/// Presence and frequency penalties are accepted in `[-LIMIT, LIMIT]` (the OpenAI API's range).
pub const PRESENCE_FREQUENCY_LIMIT: f32 = 2.0;
/// Most alternatives a request may ask for per position (the OpenAI API's limit).
pub const MAX_TOP_LOGPROBS: u32 = 20;
/// Most stop strings per request; each one costs a scan of the held-back text per token.
pub const MAX_STOP_STRINGS: usize = 16;
/// Longest stop string, in bytes.
pub const MAX_STOP_STRING_BYTES: usize = 256;
/// Most `logit_bias` entries per request (the OpenAI API's limit).
pub const MAX_LOGIT_BIAS_ENTRIES: usize = 300;
/// `logit_bias` values are accepted in `[-LIMIT, LIMIT]` (the OpenAI API's range).
pub const LOGIT_BIAS_LIMIT: f32 = 100.0;

/// Sampling and stopping options of one request. `Default` is plain sampling at temperature 1
/// with every filter and penalty off, no stop conditions besides EOS, and no logprobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; `0` means greedy (argmax after penalties).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `0` keeps all.
    pub top_k: u32,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`; `1` keeps all.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely token's; `0` keeps all.
    pub min_p: f32,
    /// Seed of the request's own generator; `None` draws a random one.
    pub seed: Option<u64>,
    /// Divides positive (multiplies negative) logits of tokens already in the prompt or output;
    /// `1` is off.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every token that already appears in the output.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it appears in the output.
    pub frequency_penalty: f32,
    /// Generating one of these ends the request (besides the model's EOS tokens).
    pub stop_token_ids: Vec<u32>,
    /// Text that ends the request when it appears in the output; it is not returned.
    pub stop: Vec<String>,
    /// Most tokens to generate; `None` runs until a stop condition or the context is full.
    pub max_tokens: Option<u32>,
    /// Keep generating past the model's EOS tokens (benchmarks use this).
    pub ignore_eos: bool,
    /// `Some(n)`: return the chosen token's logprob and the `n` most likely alternatives.
    pub logprobs: Option<u32>,
    /// Added to a token's logit before penalties, temperature, filters and the greedy argmax
    /// (OpenAI's `logit_bias`: token id → bias in [-100, 100]; -100 effectively bans the
    /// token, +100 effectively forces it). A grammar's mask still wins: a disallowed token
    /// stays −∞. Logprobs stay those of the raw logits.
    pub logit_bias: BTreeMap<u32, f32>,
    /// `Some(n)`: also return the logprob of every prompt token after the first, with the `n`
    /// most likely alternatives at each position (vLLM's `prompt_logprobs`; the completions
    /// route's `echo` with `logprobs`). Such a request never reads the prefix cache (cached
    /// positions have no logits), and it may set `max_tokens` to 0 to only score its prompt.
    pub prompt_logprobs: Option<u32>,
    /// Whether this request may decode speculatively (the request's `speculative`; the
    /// engine's `--speculative` decides whether it does). The tokens are the same either way.
    pub speculative: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            stop_token_ids: Vec::new(),
            stop: Vec::new(),
            max_tokens: None,
            ignore_eos: false,
            logprobs: None,
            logit_bias: BTreeMap::new(),
            prompt_logprobs: None,
            speculative: true,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: temperature 0, everything else default.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Whether the sampler takes the argmax instead of drawing.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Checks every field against its allowed range; `vocab_size` bounds the stop token ids.
    pub fn validate(&self, vocab_size: usize) -> Result<(), SamplingError> {
        check_range(
            "temperature",
            self.temperature,
            0.0,
            MAX_TEMPERATURE,
            "0 to 2",
        )?;
        check_range(
            "top_p",
            self.top_p,
            f32::MIN_POSITIVE,
            1.0,
            "greater than 0, at most 1",
        )?;
        check_range("min_p", self.min_p, 0.0, 1.0, "0 to 1")?;
        let rp = self.repetition_penalty;
        check_range(
            "repetition_penalty",
            rp,
            f32::MIN_POSITIVE,
            MAX_REPETITION_PENALTY,
            "greater than 0, at most 10",
        )?;
        let lim = PRESENCE_FREQUENCY_LIMIT;
        check_range(
            "presence_penalty",
            self.presence_penalty,
            -lim,
            lim,
            "-2 to 2",
        )?;
        check_range(
            "frequency_penalty",
            self.frequency_penalty,
            -lim,
            lim,
            "-2 to 2",
        )?;
        if self.max_tokens == Some(0) && self.prompt_logprobs.is_none() {
            return Err(out_of_range(
                "max_tokens",
                "0",
                "at least 1 (0 only to score the prompt)",
            ));
        }
        if let Some(n) = self.logprobs.filter(|n| *n > MAX_TOP_LOGPROBS) {
            return Err(out_of_range("logprobs", &n.to_string(), "0 to 20"));
        }
        if let Some(n) = self.prompt_logprobs.filter(|n| *n > MAX_TOP_LOGPROBS) {
            return Err(out_of_range("prompt_logprobs", &n.to_string(), "0 to 20"));
        }
        if self.stop.len() > MAX_STOP_STRINGS {
            return Err(SamplingError::TooMany {
                param: "stop",
                count: self.stop.len(),
                max: MAX_STOP_STRINGS,
            });
        }
        for stop in &self.stop {
            if stop.is_empty() || stop.len() > MAX_STOP_STRING_BYTES {
                return Err(out_of_range(
                    "stop",
                    &format!("{stop:?}"),
                    "non-empty, at most 256 bytes",
                ));
            }
        }
        if let Some(&id) = self
            .stop_token_ids
            .iter()
            .find(|id| **id as usize >= vocab_size)
        {
            return Err(SamplingError::TokenOutOfVocab {
                param: "stop_token_ids",
                id,
                vocab_size,
            });
        }
        self.validate_logit_bias(vocab_size)
    }

    /// At most 300 entries, each a token of the vocabulary with a bias in [-100, 100].
    fn validate_logit_bias(&self, vocab_size: usize) -> Result<(), SamplingError> {
        if self.logit_bias.len() > MAX_LOGIT_BIAS_ENTRIES {
            return Err(SamplingError::TooMany {
                param: "logit_bias",
                count: self.logit_bias.len(),
                max: MAX_LOGIT_BIAS_ENTRIES,
            });
        }
        for (&id, &bias) in &self.logit_bias {
            if id as usize >= vocab_size {
                return Err(SamplingError::TokenOutOfVocab {
                    param: "logit_bias",
                    id,
                    vocab_size,
                });
            }
            let lim = LOGIT_BIAS_LIMIT;
            if !(bias.is_finite() && (-lim..=lim).contains(&bias)) {
                return Err(out_of_range(
                    "logit_bias",
                    &format!("{bias} (token {id})"),
                    "-100 to 100",
                ));
            }
        }
        Ok(())
    }
}

fn check_range(
    param: &'static str,
    value: f32,
    min: f32,
    max: f32,
    allowed: &'static str,
) -> Result<(), SamplingError> {
    // `is_finite` first: NaN compares false with everything and would slip through.
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(out_of_range(param, &value.to_string(), allowed))
    }
}

fn out_of_range(param: &'static str, value: &str, allowed: &'static str) -> SamplingError {
    SamplingError::OutOfRange {
        param,
        value: value.to_string(),
        allowed,
    }
}

/// A sampling request the engine cannot honour, or logits it cannot sample from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// A parameter outside its allowed range (a client error).
    #[error("{param} = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        param: &'static str,
        value: String,
        allowed: &'static str,
    },
    /// A list parameter with too many entries (a client error).
    #[error("{param} has {count} entries, at most {max} are allowed")]
    TooMany {
        param: &'static str,
        count: usize,
        max: usize,
    },
    /// A token id that is not in the model's vocabulary (a client error).
    #[error("{param} contains token id {id}, but the vocabulary has {vocab_size} tokens")]
    TokenOutOfVocab {
        param: &'static str,
        id: u32,
        vocab_size: usize,
    },
    /// The logits hold no finite value to sample from (an engine fault, not the client's).
    #[error("cannot sample: {0}")]
    InvalidLogits(&'static str),
}

impl SamplingError {
    /// The request parameter at fault (for the OpenAI error body's `param`), if any.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            Self::OutOfRange { param, .. }
            | Self::TooMany { param, .. }
            | Self::TokenOutOfVocab { param, .. } => Some(param),
            Self::InvalidLogits(_) => None,
        }
    }
}
