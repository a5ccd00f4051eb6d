//! A deterministic fake backend for tests of the serving machinery: it stores each token id
//! in the KV slot its block table names and predicts the next token from a hash of the whole
//! sequence read back through the block table, so any paging mistake (a wrong block, a stale
//! shared block, a lost preempted slot) changes the output. Never shipped: test code only.

use std::time::Duration;

use tokenscale_engine::backend::{Backend, SeqStep, StepOutput};
use tokenscale_engine::model::ModelConfig;

pub struct FakeBackend {
    config: ModelConfig,
    block_size: usize,
    num_blocks: usize,
    /// [num_blocks * block_size] token ids: the fake's "keys and values".
    slots: Vec<u32>,
    /// Sleep per step, to give tests time to act mid-generation.
    pub step_delay: Duration,
}

impl FakeBackend {
    pub fn new(config: ModelConfig, block_size: usize, num_blocks: usize) -> Self {
        Self {
            config,
            block_size,
            num_blocks,
            slots: vec![0; block_size * num_blocks],
            step_delay: Duration::ZERO,
        }
    }

    fn slot(&self, table: &[u32], pos: usize) -> Result<usize, tokenscale_engine::Error> {
        let block = *table
            .get(pos / self.block_size)
            .ok_or_else(|| fault(format!("no block for position {pos}")))?
            as usize;
        if block >= self.num_blocks {
            return Err(fault(format!("block {block} out of range")));
        }
        Ok(block * self.block_size + pos % self.block_size)
    }
}

fn fault(message: String) -> tokenscale_engine::Error {
    tokenscale_engine::Error::Backend {
        backend: "fake",
        message,
    }
}

/// The fake model's prediction after `history`: one of 1000 ordinary tokens (ids 1000..2000).
pub fn next_token(history: &[u32]) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in history {
        h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3);
    }
    1000 + (h % 1000) as u32
}

impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn model_config(&self) -> &ModelConfig {
        &self.config
    }
    fn block_size(&self) -> usize {
        self.block_size
    }
    fn num_kv_blocks(&self) -> usize {
        self.num_blocks
    }
    fn forward(&mut self, batch: &[SeqStep<'_>]) -> tokenscale_engine::Result<StepOutput> {
        std::thread::sleep(self.step_delay);
        let vocab = self.config.vocab_size;
        let mut out = StepOutput::default();
        for (index, seq) in batch.iter().enumerate() {
            for (k, &token) in seq.tokens.iter().enumerate() {
                let slot = self.slot(seq.block_table, seq.start_pos + k)?;
                self.slots[slot] = token;
            }
            if seq.want_logits {
                let len = seq.start_pos + seq.tokens.len();
                let history: Vec<u32> = (0..len)
                    .map(|p| self.slot(seq.block_table, p).map(|s| self.slots[s]))
                    .collect::<Result<_, _>>()?;
                let next = next_token(&history) as usize;
                let mut row = vec![0.0f32; vocab];
                row[next] = 10.0;
                row[next + 1] = 9.0;
                out.logits.extend_from_slice(&row);
                out.rows.push(index);
            }
        }
        Ok(out)
    }
}

/// Greedy output of the fake model: `n` tokens after `prompt`.
pub fn expected(prompt: &[u32], n: usize) -> Vec<u32> {
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        let t = next_token(&seq);
        seq.push(t);
    }
    seq[prompt.len()..].to_vec()
}
