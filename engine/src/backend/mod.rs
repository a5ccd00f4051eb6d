//! The one interface every compute backend implements: a batched forward step that reads and
//! writes keys and values through block tables over a paged KV cache.
//!
//! The scheduler decides *which* tokens run and *which* KV blocks they use (`kv`, `sched`); a
//! backend only computes. It owns the KV *storage* (`num_kv_blocks` blocks of `block_size`
//! token slots, per layer, for keys and values) and never allocates blocks itself.

pub mod cpu;
pub mod cuda;
pub mod sim;

use crate::Result;
use crate::model::ModelConfig;
use crate::sampling::TokenLogprob;
use crate::sampling::spec::{Edit, RowSampling};

/// One sequence's part of a forward step.
#[derive(Debug, Clone, Copy)]
pub struct SeqStep<'a> {
    /// New tokens to run this step: a prefill chunk (any length ≥ 1) or one decode token.
    pub tokens: &'a [u32],
    /// Position of `tokens[0]` in its sequence, i.e. how many tokens of this sequence already
    /// have keys and values in the cache (`num_computed_tokens`).
    pub start_pos: usize,
    /// KV block ids covering positions `0 .. start_pos + tokens.len()`, in order. Position `p`
    /// lives in block `block_table[p / block_size]`, slot `p % block_size`.
    pub block_table: &'a [u32],
    /// Whether logits of this sequence's last token are wanted (false for a prefill chunk that
    /// does not end the prompt).
    pub want_logits: bool,
}

/// What a forward step returns.
#[derive(Debug, Default, Clone)]
pub struct StepOutput {
    /// `[rows.len(), vocab_size]`, row-major: the last-token logits of each sequence that asked.
    pub logits: Vec<f32>,
    /// For each logits row, the index in the batch of the sequence it belongs to.
    pub rows: Vec<usize>,
}

impl StepOutput {
    /// The logits row of batch entry `batch_index`'s last token, if it asked for logits.
    pub fn logits_of(&self, batch_index: usize, vocab_size: usize) -> Option<&[f32]> {
        let row = self.rows.iter().rposition(|&r| r == batch_index)?;
        self.logits.get(row * vocab_size..(row + 1) * vocab_size)
    }

    /// Every logits row of batch entry `batch_index`, in token order (one per token when it
    /// asked for every row; see [`Backend::forward_every_row`]).
    pub fn rows_of(
        &self,
        batch_index: usize,
        vocab_size: usize,
    ) -> impl Iterator<Item = &[f32]> + '_ {
        self.rows
            .iter()
            .zip(self.logits.chunks_exact(vocab_size.max(1)))
            .filter(move |(r, _)| **r == batch_index)
            .map(|(_, row)| row)
    }
}

/// A wanted row the backend samples where its logits are (see
/// [`Backend::forward_sampled`]): the specification's settings and this step's logit edits
/// (`sampling::spec`), as `Sampler::device_row` gives them.
#[derive(Debug, Clone, Default)]
pub struct DeviceRow {
    pub settings: RowSampling,
    pub edits: Vec<Edit>,
    /// `Some(n)`: also the chosen token's logprob and the `n` most likely alternatives, under
    /// the raw logits (the request's `logprobs`).
    pub logprobs: Option<u32>,
}

/// What [`Backend::forward_sampled`] returns.
#[derive(Debug, Default, Clone)]
pub struct SampledStep {
    /// The logits of the wanted rows left to the host sampler.
    pub output: StepOutput,
    /// `(batch index, token)` of each row sampled by the backend; −1: the row had no finite
    /// logit.
    pub sampled: Vec<(usize, i32)>,
    /// `(batch index, the chosen token's logprob, the most likely alternatives)` of each
    /// sampled row that asked for logprobs.
    pub logprobs: Vec<(usize, f32, Vec<TokenLogprob>)>,
}

/// A compute backend: CPU reference, CUDA, or the simulated performance model.
pub trait Backend: Send {
    /// Short name for logs, metrics and `/v1/models` (`cpu`, `cuda`, `sim`).
    fn name(&self) -> &'static str;
    /// The model this backend runs.
    fn model_config(&self) -> &ModelConfig;
    /// Token slots per KV block.
    fn block_size(&self) -> usize;
    /// KV blocks of storage this backend holds (the block pool's size).
    fn num_kv_blocks(&self) -> usize;
    /// Runs one step over a batch of sequences, writing their new keys and values into the
    /// cache and returning the logits that were asked for.
    fn forward(&mut self, batch: &[SeqStep<'_>]) -> Result<StepOutput>;
    /// Whether [`forward_every_row`](Self::forward_every_row) is implemented (prompt logprobs).
    fn computes_every_row(&self) -> bool {
        false
    }
    /// Whether speculative drafts may be verified on this backend: every row's logits, and
    /// step times that are the backend's own (the simulator's tokens would make its
    /// acceptance, and so its speed-up, an artefact).
    fn verifies_drafts(&self) -> bool {
        self.computes_every_row()
    }
    /// Like [`forward`](Self::forward), and also the logits of every token of the sequences
    /// whose `every_row[i]` is set (a prompt chunk of a request that asked for prompt
    /// logprobs): one row per token, in token order, the last being the row `want_logits`
    /// asks for. Only the requests that ask pay for the extra rows of the output head.
    fn forward_every_row(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
    ) -> Result<StepOutput> {
        let _ = (batch, every_row);
        Err(crate::Error::Backend {
            backend: self.name(),
            message: "prompt logprobs are not computed by this backend".into(),
        })
    }
    /// Whether [`forward_sampled`](Self::forward_sampled) samples rows itself (the CUDA
    /// backend: only ids come back instead of vocabulary-wide logits rows).
    fn samples_on_device(&self) -> bool {
        false
    }
    /// Like [`forward`](Self::forward), sampling each wanted row whose `rows[i]` (by batch
    /// index) is set by the shared specification where the logits are; the other wanted rows'
    /// logits come back for the host sampler. By default every row comes back.
    fn forward_sampled(
        &mut self,
        batch: &[SeqStep<'_>],
        rows: &[Option<DeviceRow>],
    ) -> Result<SampledStep> {
        let _ = rows;
        Ok(SampledStep {
            output: self.forward(batch)?,
            ..SampledStep::default()
        })
    }
    /// Most draft tokens one step may verify: a backend whose logits buffers are sized
    /// ahead holds that many rows beyond one per sequence. Unlimited by default.
    fn max_draft_tokens(&self) -> usize {
        usize::MAX
    }
    /// Like [`forward_sampled`](Self::forward_sampled) for a step that may hold speculative
    /// verify chunks: batch entry `i` wants a row per token when `every_row[i]` is set (empty:
    /// none does), and `rows[i]` samples its wanted rows here in token order, one
    /// [`DeviceRow`] each (fewer: the rest come back as logits). `sampled` and `logprobs` then
    /// hold one entry per sampled row, in token order. By default every row comes back.
    fn forward_sampled_rows(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
        rows: &[Vec<DeviceRow>],
    ) -> Result<SampledStep> {
        let _ = rows;
        let output = match every_row.contains(&true) {
            true => self.forward_every_row(batch, every_row)?,
            false => self.forward(batch)?,
        };
        Ok(SampledStep {
            output,
            ..SampledStep::default()
        })
    }
    /// Whether [`forward_lora`](Self::forward_lora) computes adapters (LoRA serving).
    fn computes_lora(&self) -> bool {
        false
    }
    /// Like [`forward_every_row`](Self::forward_every_row), with `adapters[i]` the LoRA
    /// adapter of batch entry `i` (`None`: the base model; empty: none for any): each row gets
    /// its own adapter's delta, unmerged, in one step.
    fn forward_lora(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
        adapters: &[Option<&crate::lora::LoraAdapter>],
    ) -> Result<StepOutput> {
        if adapters.iter().any(Option::is_some) {
            return Err(crate::Error::Backend {
                backend: self.name(),
                message: "LoRA adapters are not computed by this backend".into(),
            });
        }
        if every_row.contains(&true) {
            self.forward_every_row(batch, every_row)
        } else {
            self.forward(batch)
        }
    }
}
