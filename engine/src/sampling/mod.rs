//! Sampling: logits → next token (greedy, temperature, top-k, top-p, min-p, seeded draws,
//! repetition / presence / frequency penalties, logit bias, logprobs) and the stop conditions of a request.
//! Pure and backend-independent: every backend hands the sampler a `[vocab]` slice of f32 logits.

mod candidates;
mod exp;
mod logprobs;
mod params;
mod rng;
mod sampler;
pub mod spec;
mod stop;
mod weights;

pub(crate) use exp::exp;
#[cfg(test)]
pub(crate) use exp::{POLY as EXP_POLY, ROUND_MAGIC as EXP_ROUND_MAGIC};
pub use logprobs::TokenLogprob;
pub use params::{
    LOGIT_BIAS_LIMIT, MAX_LOGIT_BIAS_ENTRIES, MAX_REPETITION_PENALTY, MAX_STOP_STRING_BYTES,
    MAX_STOP_STRINGS, MAX_TEMPERATURE, MAX_TOP_LOGPROBS, PRESENCE_FREQUENCY_LIMIT, SamplingError,
    SamplingParams,
};
pub use rng::{Rng, random_seed};
pub use sampler::{SampledToken, Sampler};
pub use stop::{FinishReason, StopCheck, StopMatcher, finish_on_token};
