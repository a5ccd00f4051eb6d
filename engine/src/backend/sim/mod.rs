//! The `sim` backend: no weights; each step sleeps the time the shared performance model
//! (`tokenscale_common::perf_model`) gives for its batch and emits deterministic tokens, so the
//! real scheduler, KV manager, server and metrics run at a modelled speed on any laptop.

mod load;
mod tokens;

use std::time::Duration;

use tokenscale_common::perf_model::PerfProfile;

use super::{Backend, SeqStep, StepOutput};
use crate::Result;
use crate::model::{ModelConfig, RopeLayout, RopeScaling};

pub use load::{DEFAULT_PROFILE, load_sim, read_profile};
pub use tokens::{SimVocab, token_at};

/// A backend that models a replica instead of computing one.
#[derive(Debug)]
pub struct SimBackend {
    profile: PerfProfile,
    config: ModelConfig,
    vocab: SimVocab,
}

/// What one step costs under the model: prompt tokens computed, sequences decoding one token,
/// and KV tokens attention reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepLoad {
    pub prefill_tokens: u64,
    pub decode_seqs: u64,
    pub kv_tokens: u64,
}

impl StepLoad {
    /// Classifies a batch: a one-token step of a sequence past its first position is a decode;
    /// anything else is prompt work (a prefill chunk).
    pub fn of(batch: &[SeqStep<'_>]) -> Self {
        let mut load = Self::default();
        for seq in batch {
            let n = seq.tokens.len() as u64;
            if n == 1 && seq.start_pos > 0 {
                load.decode_seqs += 1;
            } else {
                load.prefill_tokens += n;
            }
            load.kv_tokens += seq.start_pos as u64 + n;
        }
        load
    }
}

impl SimBackend {
    /// A simulated replica of `profile`, serving a model with context `context_length`.
    pub fn new(profile: PerfProfile, context_length: usize) -> Self {
        let vocab = SimVocab::new();
        let config = ModelConfig {
            architecture: "sim".into(),
            num_layers: 1,
            hidden_size: 1,
            ffn_size: 1,
            num_heads: 1,
            num_kv_heads: 1,
            head_dim: 1,
            rope_base: 10_000.0,
            rope_layout: RopeLayout::Adjacent,
            rope_scaling: RopeScaling::None,
            rms_norm_eps: 1e-5,
            context_length,
            vocab_size: vocab.size(),
            tied_embeddings: true,
            qkv_bias: false,
            qk_norm: false,
        };
        Self {
            profile,
            config,
            vocab,
        }
    }

    /// The performance profile this backend follows.
    pub fn profile(&self) -> &PerfProfile {
        &self.profile
    }

    /// Seconds the model gives for `batch`.
    pub fn step_time_s(&self, batch: &[SeqStep<'_>]) -> f64 {
        let load = StepLoad::of(batch);
        self.profile
            .step_time_s(load.prefill_tokens, load.decode_seqs, load.kv_tokens)
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn model_config(&self) -> &ModelConfig {
        &self.config
    }

    fn block_size(&self) -> usize {
        self.profile.kv.block_tokens as usize
    }

    fn num_kv_blocks(&self) -> usize {
        self.profile.kv.blocks as usize
    }

    fn forward(&mut self, batch: &[SeqStep<'_>]) -> Result<StepOutput> {
        self.forward_every_row(batch, &[])
    }

    fn computes_every_row(&self) -> bool {
        true
    }

    /// Refused: the simulator's deterministic tokens would give an acceptance rate, and so a
    /// speed-up, that no model has.
    fn verifies_drafts(&self) -> bool {
        false
    }

    fn forward_every_row(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
    ) -> Result<StepOutput> {
        if batch.is_empty() {
            return Ok(StepOutput::default());
        }
        // The engine loop owns this thread: sleeping here is the modelled forward pass.
        std::thread::sleep(Duration::from_secs_f64(self.step_time_s(batch)));
        let vocab_size = self.vocab.size();
        let mut out = StepOutput::default();
        for (index, seq) in batch.iter().enumerate() {
            let end = seq.start_pos + seq.tokens.len();
            let first = if every_row.get(index).copied().unwrap_or(false) {
                seq.start_pos
            } else if seq.want_logits {
                end - 1
            } else {
                continue;
            };
            // Each row predicts the token that follows its own, at position `pos + 1`.
            for pos in first..end {
                let mut row = vec![-1.0e4_f32; vocab_size]; // [vocab_size]
                row[token_at(pos + 1) as usize] = 1.0e4;
                out.logits.extend_from_slice(&row);
                out.rows.push(index);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
