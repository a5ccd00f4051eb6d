//! Speculative decoding without a second model: n-gram (prompt-lookup) drafts verified in one
//! batched forward, exact for every sampling mode, with a per-sequence draft length.
//!
//! A draft is the `k` tokens that followed the latest earlier occurrence of the sequence's longest
//! suffix seen before, repeating the period where that runs into the end (`ngram.rs`). The engine runs the last
//! token and the draft as one small chunk with every row's logits kept, then samples row by row
//! with the request's own sampler (`verify.rs`): a row's token is kept and the next row sampled
//! only while it equals the draft. The draft is a point mass q, so this is rejection sampling:
//! token d is accepted with probability p(d), and on rejection the token is p's draw given that it
//! is not d, i.e. p with d removed and renormalised. Each kept token is therefore drawn from
//! exactly the distribution plain decoding would use, with the same seeded draw, so a seeded
//! request gives the same tokens with and without speculation, at any temperature, with
//! top-k/top-p/min-p, penalties and `logit_bias` (the sampler's counts advance token by token as in
//! plain decoding). Grammar-constrained requests are not speculated: their mask is computed for one
//! position per step. The draft length follows each sequence's acceptance per match length and,
//! with `auto`, the engine's measured step time by draft length (`policy.rs`).

mod ngram;
mod policy;
pub mod tasks;
mod verify;

pub use ngram::{Lookup, lookup, propose};
pub use policy::{DraftCost, DraftPolicy, StepCost, expected_tokens};
pub use verify::{accepted, verify};

/// `serve --speculative`: whether and how sequences speculate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpeculativeMode {
    /// n-gram drafts only where the measured step time says a verify step pays for itself.
    #[default]
    Auto,
    /// Never.
    Off,
    /// n-gram drafts whenever there is a match, at the length acceptance suggests (at least 1).
    Ngram,
}

impl std::str::FromStr for SpeculativeMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            "ngram" => Ok(Self::Ngram),
            other => Err(format!(
                "--speculative must be auto, off or ngram, got {other:?}"
            )),
        }
    }
}

/// Speculative decoding's settings (vLLM's `speculative_config` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculativeConfig {
    pub mode: SpeculativeMode,
    /// Most draft tokens per verify step.
    pub num_speculative_tokens: usize,
    /// Longest n-gram matched against the sequence.
    pub prompt_lookup_max: usize,
    /// Shortest n-gram matched.
    pub prompt_lookup_min: usize,
}

impl Default for SpeculativeConfig {
    /// Drafts of up to 8 tokens from matches of up to 8: a degenerate loop's drafts are all
    /// kept, and a match that long tells them from a recurring phrase's, since acceptance is
    /// learnt per match length (replayed on the quotes task's greedy output,
    /// `examples/spec_replay`: 1.66 tokens a step with 4 and 4, 1.92 with 8 and 8; the draft
    /// length itself is still chosen per step from acceptance and the measured step cost).
    fn default() -> Self {
        Self {
            mode: SpeculativeMode::Auto,
            num_speculative_tokens: 8,
            prompt_lookup_max: 8,
            prompt_lookup_min: 2,
        }
    }
}

impl SpeculativeConfig {
    /// Speculation off.
    pub fn off() -> Self {
        Self {
            mode: SpeculativeMode::Off,
            ..Self::default()
        }
    }

    /// Checks the numbers; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=16).contains(&self.num_speculative_tokens) {
            return Err(format!(
                "--num-speculative-tokens must be 1 to 16, got {}",
                self.num_speculative_tokens
            ));
        }
        if self.prompt_lookup_min == 0 || self.prompt_lookup_min > self.prompt_lookup_max {
            return Err(format!(
                "--prompt-lookup-min must be at least 1 and at most --prompt-lookup-max ({}), got {}",
                self.prompt_lookup_max, self.prompt_lookup_min
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
