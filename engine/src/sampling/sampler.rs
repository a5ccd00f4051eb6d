//! The sampler: one per request, owning its seeded generator and the token counts its penalties
//! need. Order of operations (as in vLLM): grammar mask → logit bias → penalties → temperature →
//! min-p → top-k → top-p → draw (or the argmax when greedy). This is the one place a request's
//! sampling options touch the logits, for every backend.

use std::collections::{HashMap, HashSet};

use super::candidates::{Candidate, apply_top_p, top_k_of};
use super::logprobs::{TokenLogprob, logprob_entry};
use super::params::{SamplingError, SamplingParams};
use super::rng::{Rng, random_seed};
use super::spec;
use super::weights;
use crate::grammar::TokenMask;

/// One sampled token, with logprobs when the request asked for them (or one scored prompt
/// token).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledToken {
    /// The chosen token.
    pub token_id: u32,
    /// Log-probability of the chosen token under the model's raw distribution (before penalties
    /// and temperature, as vLLM reports it); `None` unless `logprobs` was requested.
    pub logprob: Option<f32>,
    /// The `n` most likely tokens under the raw distribution, most likely first.
    pub top_logprobs: Vec<TokenLogprob>,
}

/// Draws tokens for one request from the logits the model produces at each step.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    seed: u64,
    rng: Rng,
    /// Distinct prompt tokens (the repetition penalty covers the prompt too).
    prompt_tokens: HashSet<u32>,
    /// How often each token appears in the output so far.
    output_counts: HashMap<u32, u32>,
    /// Reused per step: [vocab] penalised logits, and the draw's buffers.
    scratch: Vec<f32>,
    buffers: Buffers,
}

impl Sampler {
    /// A sampler for a request with `prompt_ids`; `params` should have passed `validate`.
    pub fn new(params: &SamplingParams, prompt_ids: &[u32]) -> Self {
        let seed = params.seed.unwrap_or_else(random_seed);
        let wants_prompt = params.repetition_penalty != 1.0;
        Self {
            params: params.clone(),
            seed,
            rng: Rng::seeded(seed),
            prompt_tokens: if wants_prompt {
                prompt_ids.iter().copied().collect()
            } else {
                HashSet::new()
            },
            output_counts: HashMap::new(),
            scratch: Vec::new(),
            buffers: Buffers::default(),
        }
    }

    /// A sampler that continues an answer whose first tokens, `output_ids`, were generated
    /// (elsewhere) for the same prompt and parameters: the penalties count them as output, and
    /// the seeded generator skips the draws they took (one per token unless greedy), so each
    /// next token is drawn exactly as the uninterrupted run would have drawn it.
    pub fn resume(params: &SamplingParams, prompt_ids: &[u32], output_ids: &[u32]) -> Self {
        let mut sampler = Self::new(params, prompt_ids);
        for &id in output_ids {
            *sampler.output_counts.entry(id).or_insert(0) += 1;
            if !params.is_greedy() {
                sampler.rng.next_u64();
            }
        }
        sampler
    }

    /// The seed in use (the request's, or the one drawn for it), so a run can be replayed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The parameters this sampler was built with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from `logits` (`[vocab]`) and records it as part of the output.
    pub fn sample(&mut self, logits: &[f32]) -> Result<SampledToken, SamplingError> {
        self.sample_masked(logits, None)
    }

    /// Like [`sample`](Self::sample), choosing only among the tokens `mask` allows (a
    /// grammar's next tokens): the others' logits become −∞ before penalties, temperature and
    /// filters, so every sampling mode respects it. Logprobs stay those of the raw logits.
    pub fn sample_masked(
        &mut self,
        logits: &[f32],
        mask: Option<&TokenMask>,
    ) -> Result<SampledToken, SamplingError> {
        if logits.is_empty() {
            return Err(SamplingError::InvalidLogits("the logits are empty"));
        }
        let penalised = self.has_penalties();
        let biased = !self.params.logit_bias.is_empty();
        let rewritten = penalised || biased || mask.is_some();
        if rewritten {
            self.scratch.clear();
            self.scratch.extend_from_slice(logits);
            if let Some(mask) = mask {
                mask.apply(&mut self.scratch);
            }
            for e in self.edits(logits.len()) {
                self.scratch[e.id as usize] = spec::apply_edit(self.scratch[e.id as usize], &e);
            }
        }
        let view: &[f32] = if rewritten { &self.scratch } else { logits };
        let token_id = if self.params.is_greedy() {
            argmax(view)?
        } else {
            draw(&self.params, view, &mut self.buffers, &mut self.rng)?
        };
        *self.output_counts.entry(token_id).or_insert(0) += 1;
        let (logprob, top) = match self.params.logprobs {
            None => (None, Vec::new()),
            Some(n) => {
                let (logprob, top) = logprob_entry(logits, token_id, n);
                (Some(logprob), top)
            }
        };
        Ok(SampledToken {
            token_id,
            logprob,
            top_logprobs: top,
        })
    }

    /// What the device sampler needs for this step, by the specification: the row's settings
    /// (drawing this token's uniform from the seeded generator, as [`sample`](Self::sample)
    /// would) and its logit edits. The token it draws is then recorded with
    /// [`accept`](Self::accept).
    pub fn device_row(&mut self, vocab: usize) -> (spec::RowSampling, Vec<spec::Edit>) {
        let p = &self.params;
        let row = if p.is_greedy() {
            spec::RowSampling::default()
        } else {
            spec::RowSampling {
                inv_t: 1.0 / p.temperature,
                min_weight: spec::min_weight(p.min_p),
                top_k: p.top_k,
                top_p: p.top_p,
                uniform: self.rng.next_f64(),
            }
        };
        (row, self.edits(vocab))
    }

    /// Records a token the device drew for this request (see [`device_row`](Self::device_row)).
    pub fn accept(&mut self, token_id: u32) -> SampledToken {
        *self.output_counts.entry(token_id).or_insert(0) += 1;
        SampledToken {
            token_id,
            logprob: None,
            top_logprobs: Vec::new(),
        }
    }

    /// Whether any penalty changes the logits at this step.
    fn has_penalties(&self) -> bool {
        let p = &self.params;
        let output = !self.output_counts.is_empty()
            && (p.presence_penalty != 0.0 || p.frequency_penalty != 0.0);
        output || p.repetition_penalty != 1.0
    }

    /// This step's logit bias and penalties, one edit per touched token (the specification's
    /// form, which the device sampler applies too).
    pub fn edits(&self, vocab: usize) -> Vec<spec::Edit> {
        let p = &self.params;
        let penalised = self.has_penalties();
        let none = HashMap::new();
        let inputs = spec::EditInputs {
            logit_bias: &p.logit_bias,
            repetition: if penalised { p.repetition_penalty } else { 1.0 },
            presence: if penalised { p.presence_penalty } else { 0.0 },
            frequency: if penalised { p.frequency_penalty } else { 0.0 },
            prompt: &self.prompt_tokens,
            output_counts: if penalised {
                &self.output_counts
            } else {
                &none
            },
        };
        spec::edits(&inputs, vocab)
    }
}

/// Reused buffers of the draw.
#[derive(Debug, Clone, Default)]
struct Buffers {
    /// [vocab] unnormalised probabilities.
    weights: Vec<f32>,
    /// [vocab / BLOCK] sums of `weights`.
    block_sums: Vec<f64>,
    /// Tokens left after top-k / top-p.
    candidates: Vec<Candidate>,
}

/// Temperature and min-p as weights over the whole vocabulary, then top-k and top-p on the
/// surviving candidates, then one draw.
fn draw(
    p: &SamplingParams,
    logits: &[f32],
    buf: &mut Buffers,
    rng: &mut Rng,
) -> Result<u32, SamplingError> {
    let max = weights::max_logit(logits);
    if !max.is_finite() {
        return Err(SamplingError::InvalidLogits("no finite logit"));
    }
    // min-p: p_i >= min_p * p_max  <=>  weight_i >= min_p, since weights are relative to the max.
    let min_weight = spec::min_weight(p.min_p);
    let total = weights::fill(
        logits,
        max,
        1.0 / p.temperature,
        min_weight,
        &mut buf.weights,
        &mut buf.block_sums,
    );
    let no_candidate = SamplingError::InvalidLogits("no candidate left");
    if p.top_k == 0 && p.top_p >= 1.0 {
        return weights::pick(&buf.weights, &buf.block_sums, rng.next_f64() * total)
            .ok_or(no_candidate);
    }
    // A token lighter than (1 - top_p) · total / vocab can never be in the nucleus: all tokens
    // at most that light together weigh less than the mass top-p leaves out.
    let vocab = buf.weights.len() as f64;
    let floor = if p.top_k == 0 {
        ((1.0 - f64::from(p.top_p)) * total / vocab) as f32
    } else {
        0.0
    };
    if p.top_k > 0 {
        top_k_of(&buf.weights, p.top_k as usize, &mut buf.candidates);
    } else {
        buf.candidates.clear();
        let kept = buf
            .weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w > 0.0 && **w >= floor);
        buf.candidates.extend(kept.map(|(id, &weight)| Candidate {
            id: id as u32,
            weight,
        }));
    }
    if p.top_p < 1.0 {
        // Top-p measures against the mass top-k kept (or all of it: the floor only skips
        // tokens that cannot be in the nucleus).
        let before = match p.top_k {
            0 => total,
            _ => buf.candidates.iter().map(|c| f64::from(c.weight)).sum(),
        };
        apply_top_p(&mut buf.candidates, p.top_p, before);
    }
    // The draw walks the kept tokens in id order, as the device sampler does.
    buf.candidates.sort_unstable_by_key(|c| c.id);
    let total: f64 = buf.candidates.iter().map(|c| f64::from(c.weight)).sum();
    let mut target = rng.next_f64() * total;
    for c in &buf.candidates {
        target -= f64::from(c.weight);
        if target < 0.0 {
            return Ok(c.id);
        }
    }
    // Rounding can leave `target` a hair above zero after the last candidate.
    buf.candidates.last().map(|c| c.id).ok_or(no_candidate)
}

impl SampledToken {
    /// Prompt token `token_id` scored by the logits of the position before it, with the `n`
    /// most likely alternatives there.
    pub fn scored(logits: &[f32], token_id: u32, n: u32) -> Self {
        let (logprob, top_logprobs) = logprob_entry(logits, token_id, n);
        Self {
            token_id,
            logprob: Some(logprob),
            top_logprobs,
        }
    }
}

/// Index of the largest logit; the lowest index wins a tie, so greedy is deterministic. NaN
/// never compares greater, so it is never chosen.
fn argmax(logits: &[f32]) -> Result<u32, SamplingError> {
    let (mut best_id, mut best) = (None, f32::NEG_INFINITY);
    for (id, &l) in logits.iter().enumerate() {
        if l > best {
            (best_id, best) = (Some(id as u32), l);
        }
    }
    best_id.ok_or(SamplingError::InvalidLogits("no finite logit"))
}
