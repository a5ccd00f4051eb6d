//! The CPU backend: the reference every other backend is compared with, and a fast path
//! (activations quantised to 8 bits, integer dot products against the quantised weights).

mod attention;
mod forward;
mod kv_store;
mod linear;
mod lora;
mod ops;

use std::sync::Arc;

use self::forward::{Run, Step, forward};
use self::kv_store::{F16Bits, KvStore};
use crate::backend::{Backend, SeqStep, StepOutput};
use crate::lora::LoraAdapter;
use crate::model::{Model, ModelConfig};
use crate::{Error, Result};

/// How activations meet the quantised weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 activations against weights dequantised in registers: the reference.
    Reference,
    /// Activations quantised per 32 values to `i8` and integer dot products (llama.cpp's
    /// scheme), keys and values cached as f16 (llama.cpp's and vLLM's default); what `serve`
    /// runs. Its logit error against the reference is measured by the
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
    kv: Kv,
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

/// The KV cache in the element type the precision uses.
#[derive(Debug)]
enum Kv {
    F32(KvStore<f32>),
    F16(KvStore<F16Bits>),
}

impl Kv {
    fn block_size(&self) -> usize {
        match self {
            Kv::F32(s) => s.block_size,
            Kv::F16(s) => s.block_size,
        }
    }

    fn num_blocks(&self) -> usize {
        match self {
            Kv::F32(s) => s.num_blocks,
            Kv::F16(s) => s.num_blocks,
        }
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
        let overflow = || {
            backend_error(format!(
                "{num_kv_blocks} KV blocks of {block_size} overflow"
            ))
        };
        let (layers, kv_heads, hd) = (c.num_layers, c.num_kv_heads, c.head_dim);
        let kv = match options.precision {
            Precision::Reference => Kv::F32(
                KvStore::new(layers, num_kv_blocks, block_size, kv_heads, hd)
                    .ok_or_else(overflow)?,
            ),
            Precision::Fast => Kv::F16(
                KvStore::new(layers, num_kv_blocks, block_size, kv_heads, hd)
                    .ok_or_else(overflow)?,
            ),
        };
        // A one-sequence step streams every weight once: huge pages spare a TLB miss per
        // 4 KiB of them (interleaved runs on a busy 2-core VM: one-sequence decode 1.04x on
        // Q4_1's row-per-block layout of then).
        let m = &model;
        crate::quant::advise_huge_pages(
            [&m.token_embd].into_iter().chain(m.output.as_ref()).chain(
                m.layers
                    .iter()
                    .flat_map(|l| [&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down]),
            ),
        );
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
    pub fn kv_bytes_per_token(config: &ModelConfig, precision: Precision) -> usize {
        let elem = match precision {
            Precision::Reference => std::mem::size_of::<f32>(),
            Precision::Fast => std::mem::size_of::<F16Bits>(),
        };
        2 * config.num_layers * config.kv_dim() * elem
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
            if s.block_table.len() * self.kv.block_size() < end {
                return Err(backend_error(format!(
                    "batch entry {i}: block table of {} blocks cannot hold {end} tokens",
                    s.block_table.len()
                )));
            }
            if let Some(&bad) = s
                .block_table
                .iter()
                .find(|&&b| b as usize >= self.kv.num_blocks())
            {
                return Err(backend_error(format!(
                    "batch entry {i}: block {bad} outside the pool of {}",
                    self.kv.num_blocks()
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
        self.kv.block_size()
    }

    fn num_kv_blocks(&self) -> usize {
        self.kv.num_blocks()
    }

    fn forward(&mut self, batch: &[SeqStep<'_>]) -> Result<StepOutput> {
        self.forward_every_row(batch, &[])
    }

    fn computes_every_row(&self) -> bool {
        true
    }

    fn forward_every_row(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
    ) -> Result<StepOutput> {
        self.forward_lora(batch, every_row, &[])
    }

    fn computes_lora(&self) -> bool {
        true
    }

    fn forward_lora(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
        adapters: &[Option<&LoraAdapter>],
    ) -> Result<StepOutput> {
        self.validate(batch)?;
        if batch.is_empty() {
            return Ok(StepOutput::default());
        }
        if let Some(bad) = adapters
            .iter()
            .flatten()
            .find(|a| a.layers.len() != self.model.config.num_layers)
        {
            return Err(backend_error(format!(
                "LoRA adapter {:?} has {} layers, the model {}",
                bad.name,
                bad.layers.len(),
                self.model.config.num_layers
            )));
        }
        let (model, run) = (&self.model, self.run);
        let step = Step {
            batch,
            every_row,
            adapters,
        };
        Ok(match &mut self.kv {
            Kv::F32(kv) => self.pool.install(|| forward(model, kv, step, run)),
            Kv::F16(kv) => self.pool.install(|| forward(model, kv, step, run)),
        })
    }
}
