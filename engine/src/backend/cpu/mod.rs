//! The CPU backend: the reference every other backend is compared with, and a fast path
//! (activations quantised to 8 bits, integer dot products against the quantised weights).

mod attention;
mod forward;
mod kv_store;
mod linear;
mod ops;

use std::sync::Arc;

use self::forward::{Run, forward};
use self::kv_store::KvStore;
use crate::backend::{Backend, SeqStep, StepOutput};
use crate::model::{Model, ModelConfig};
use crate::{Error, Result};

/// How activations meet the quantised weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 activations against weights dequantised in registers: the reference.
    Reference,
    /// Activations quantised per 32 values to `i8` and integer dot products (llama.cpp's
    /// scheme); what `serve` runs. Its logit error against the reference is measured by the
    /// golden test.
    #[default]
    Fast,
}

/// Settings of a CPU backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuOptions {
    pub precision: Precision,
    /// Worker threads (0: one per available core).
    pub threads: usize,
}

impl Default for CpuOptions {
    fn default() -> Self {
        Self {
            precision: Precision::Fast,
            threads: 0,
        }
    }
}

/// Runs a [`Model`] on the CPU over a paged KV cache it owns.
pub struct CpuBackend {
    model: Arc<Model>,
    kv: KvStore,
    run: Run,
    pool: rayon::ThreadPool,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

fn backend_error(message: String) -> Error {
    Error::Backend {
        backend: "cpu",
        message,
    }
}

impl CpuBackend {
    /// A backend for `model` with `num_kv_blocks` blocks of `block_size` token slots.
    pub fn new(
        model: Arc<Model>,
        num_kv_blocks: usize,
        block_size: usize,
        options: CpuOptions,
    ) -> Result<Self> {
        if block_size == 0 || num_kv_blocks == 0 {
            return Err(backend_error(
                "the KV cache needs at least one block of one slot".into(),
            ));
        }
        let c = &model.config;
        let kv =
            KvStore::new(c.num_layers, num_kv_blocks, block_size, c.kv_dim()).ok_or_else(|| {
                backend_error(format!(
                    "{num_kv_blocks} KV blocks of {block_size} overflow"
                ))
            })?;
        let threads = match options.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("tokenscale-cpu-{i}"))
            .build()
            .map_err(|e| backend_error(format!("cannot start {threads} threads: {e}")))?;
        Ok(Self {
            model,
            kv,
            run: Run {
                precision: options.precision,
                threads,
            },
            pool,
        })
    }

    /// Bytes of KV storage one token slot takes (keys and values, all layers).
    pub fn kv_bytes_per_token(config: &ModelConfig) -> usize {
        2 * config.num_layers * config.kv_dim() * std::mem::size_of::<f32>()
    }

    /// The model this backend runs.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    fn validate(&self, batch: &[SeqStep<'_>]) -> Result<()> {
        let c = &self.model.config;
        for (i, s) in batch.iter().enumerate() {
            let end = s.start_pos + s.tokens.len();
            if s.tokens.is_empty() {
                return Err(backend_error(format!("batch entry {i} has no tokens")));
            }
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(backend_error(format!(
                    "batch entry {i}: token id {bad} ≥ vocabulary {}",
                    c.vocab_size
                )));
            }
            if end > c.context_length {
                return Err(backend_error(format!(
                    "batch entry {i}: position {end} exceeds the context length {}",
                    c.context_length
                )));
            }
            if s.block_table.len() * self.kv.block_size < end {
                return Err(backend_error(format!(
                    "batch entry {i}: block table of {} blocks cannot hold {end} tokens",
                    s.block_table.len()
                )));
            }
            if let Some(&bad) = s
                .block_table
                .iter()
                .find(|&&b| b as usize >= self.kv.num_blocks)
            {
                return Err(backend_error(format!(
                    "batch entry {i}: block {bad} outside the pool of {}",
                    self.kv.num_blocks
                )));
            }
        }
        Ok(())
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn model_config(&self) -> &ModelConfig {
        &self.model.config
    }

    fn block_size(&self) -> usize {
        self.kv.block_size
    }

    fn num_kv_blocks(&self) -> usize {
        self.kv.num_blocks
    }

    fn forward(&mut self, batch: &[SeqStep<'_>]) -> Result<StepOutput> {
        self.validate(batch)?;
        if batch.is_empty() {
            return Ok(StepOutput::default());
        }
        let (model, kv, run) = (&self.model, &mut self.kv, self.run);
        Ok(self.pool.install(|| forward(model, kv, batch, run)))
    }
}
