//! `CudaBackend`: the [`Backend`] on one GPU. Plans each step on the host, runs decode steps
//! through CUDA graphs captured per (batch bucket, context bucket), and sizes the KV cache
//! from the memory left after weights and activations.

use std::collections::HashMap;

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaSlice};

use super::buckets::{GraphKey, batch_buckets, context_buckets, graph_key};
use super::device::Gpu;
use super::device_sampler::{DeviceSampler, Layout, layout, layout_rows};
use super::forward::{self, AttentionKind, BufferSizes, Buffers, LayerCache, Model, StepShape};
use super::geometry::{check_attention_shape, decode_split, max_split_rows, prefill_tiles};
use super::options::{CudaOptions, DeviceSampling};
use super::plan::{PlanLimits, StepPlan, mixed_decode, pad_decode, plan_step_rows};
use super::weights::DeviceWeights;
use super::{Error, Result, gemm, launch, memory};
use crate::backend::{Backend, DeviceRow, SampledStep, SeqStep, StepOutput};
use crate::model::{Checkpoint, ModelConfig};

/// Memory kept free beyond the utilisation budget for graphs and cuBLAS internals.
const RESERVE_BYTES: usize = 256 << 20;

/// Draft rows the logits buffers hold per sequence beyond its own row: speculative verify
/// steps are capped to this many draft tokens per running sequence on average
/// (`max_draft_tokens`, which the drafting loop spends; one sequence may still draft up to
/// `--num-speculative-tokens`, 8 by default, when others draft less), which keeps the buffers
/// at a few hundred MiB at 256 sequences instead of `max_batch_tokens` rows.
const DRAFT_ROWS_PER_SEQ: usize = 4;

/// Where each wanted logits row of a step sits in the device logits buffer.
struct StepRows {
    /// `(row in the logits buffer, batch index)`, in batch order.
    rows: Vec<(usize, usize)>,
    /// Rows the output head computed.
    computed: usize,
}

/// A captured decode graph.
struct DecodeGraph(CudaGraph);

// SAFETY: a CUDA graph and its executable are plain driver handles that any thread may launch
// while the context is current; the backend launches them only through `&mut self`, so never
// from two threads at once, and cudarc binds the context on each call.
unsafe impl Send for DecodeGraph {}

/// The CUDA backend. Field order is drop order: graphs and cuBLAS go before the memory they use.
pub struct CudaBackend {
    graphs: HashMap<GraphKey, DecodeGraph>,
    blas: CudaBlas,
    _workspace: CudaSlice<u8>,
    /// Serving's on-device sampling and the pinned buffers results come back through.
    sampler: DeviceSampler,
    bufs: Buffers,
    cache: Vec<LayerCache>,
    weights: DeviceWeights,
    cfg: ModelConfig,
    opts: CudaOptions,
    limits: PlanLimits,
    buckets: Vec<usize>,
    max_model_len: usize,
    /// Capacity of the decode partial-result buffers, in (sequence × split) rows.
    split_rows: usize,
    gpu: Gpu,
}

impl CudaBackend {
    /// Opens the GPU, loads the checkpoint's weights (bf16 as stored, anything else rounded
    /// to bf16), and sizes the KV cache.
    pub fn new(checkpoint: &Checkpoint, opts: CudaOptions) -> Result<Self> {
        let cfg = checkpoint
            .config()
            .map_err(|e| Error::Model(e.to_string()))?;
        check_attention_shape(cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
            .map_err(Error::Model)?;
        let gpu = Gpu::open(opts.device)?;
        let weights = DeviceWeights::load(&gpu, checkpoint.tensors().as_ref(), &cfg)?;
        Self::assemble(gpu, weights, cfg, opts)
    }

    /// Like [`CudaBackend::new`] with random weights of `cfg`'s shape (speed measurements).
    pub fn new_random(cfg: ModelConfig, opts: CudaOptions, seed: u64) -> Result<Self> {
        check_attention_shape(cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
            .map_err(Error::Model)?;
        let gpu = Gpu::open(opts.device)?;
        let weights = DeviceWeights::random(&gpu, &cfg, seed)?;
        Self::assemble(gpu, weights, cfg, opts)
    }

    fn assemble(
        gpu: Gpu,
        weights: DeviceWeights,
        cfg: ModelConfig,
        opts: CudaOptions,
    ) -> Result<Self> {
        if opts.block_size == 0 || opts.max_num_seqs == 0 {
            return Err(Error::Model(
                "block size and max sequences must be positive".into(),
            ));
        }
        let max_model_len = opts
            .max_model_len
            .unwrap_or(cfg.context_length)
            .clamp(1, cfg.context_length.max(1));
        let max_blocks_per_seq = max_model_len.div_ceil(opts.block_size);
        let buckets = batch_buckets(opts.max_num_seqs);
        let sm = gpu.info.sm_count;
        let max_split_rows = max_split_rows(
            &buckets,
            &context_buckets(max_model_len),
            cfg.num_kv_heads,
            sm,
        );
        let max_tokens = opts.max_batch_tokens.max(opts.max_num_seqs);
        let sizes = BufferSizes {
            max_tokens,
            max_seqs: opts.max_num_seqs,
            max_logit_rows: verify_rows(opts.max_num_seqs, max_tokens),
            max_blocks_per_seq,
            max_split_rows,
        };
        let bufs = Buffers::new(&gpu, &cfg, sizes)?;
        let sampler = DeviceSampler::new(&gpu, sizes.max_logit_rows)?;
        let blas = CudaBlas::new(gpu.stream.clone())?;
        let mut workspace = gpu.stream.alloc_zeros::<u8>(gemm::WORKSPACE_BYTES)?;
        gemm::set_workspace(&blas, &gpu.stream, &mut workspace)?;
        gpu.stream.synchronize()?;
        let (free, total) = gpu.memory()?;
        let block_bytes = memory::kv_block_bytes(
            cfg.num_layers,
            cfg.num_kv_heads,
            cfg.head_dim,
            opts.block_size,
        );
        let mut num_blocks = memory::kv_blocks(
            free,
            total,
            opts.gpu_memory_utilization,
            RESERVE_BYTES,
            block_bytes,
            max_blocks_per_seq,
        )
        .map_err(Error::Model)?;
        if let Some(cap) = opts.max_kv_blocks {
            num_blocks = num_blocks.min(cap.max(1));
        }
        let per_layer = num_blocks * cfg.num_kv_heads * opts.block_size * cfg.head_dim;
        let cache = (0..cfg.num_layers)
            .map(|_| {
                Ok(LayerCache {
                    k: gpu.stream.alloc_zeros(per_layer)?,
                    v: gpu.stream.alloc_zeros(per_layer)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let limits = PlanLimits {
            block_size: opts.block_size,
            num_blocks,
            vocab_size: cfg.vocab_size,
            max_blocks_per_seq,
            max_tokens: sizes.max_tokens,
            max_seqs: opts.max_num_seqs,
            max_logit_rows: sizes.max_logit_rows,
        };
        tracing::info!(gpu = %gpu.info.name, weights_mib = weights.bytes >> 20, num_blocks, max_model_len, "cuda backend ready");
        Ok(Self {
            graphs: HashMap::new(),
            blas,
            _workspace: workspace,
            sampler,
            bufs,
            cache,
            weights,
            cfg,
            opts,
            limits,
            buckets,
            max_model_len,
            split_rows: max_split_rows,
            gpu,
        })
    }

    /// The opened device.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Bytes of the weights on the device.
    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes
    }

    /// Runs a step and samples the next token of every sequence that wants logits on the
    /// device (`sampling[i]` for the `i`-th such sequence), among the tokens `masks` allows
    /// (`[sampling.len(), ceil(vocab / 32)]` grammar bitmasks, the layout of
    /// `grammar::TokenMask`; `None`: every token). Returns `(batch index, token)`.
    pub fn forward_sample(
        &mut self,
        batch: &[SeqStep<'_>],
        sampling: &[DeviceSampling],
        masks: Option<&[u32]>,
    ) -> Result<Vec<(usize, u32)>> {
        let rows = self.run_step(batch)?;
        if sampling.len() != rows.rows.len() {
            return Err(Error::Step(format!(
                "{} sampling rows for {} wanted logits",
                sampling.len(),
                rows.rows.len()
            )));
        }
        if rows.rows.is_empty() {
            return Ok(Vec::new());
        }
        let n = rows.computed;
        let mut temperature = vec![0.0f32; n];
        let (mut top_k, mut top_p, mut uniforms) =
            (vec![0i32; n], vec![1.0f32; n], vec![0.0f32; n]);
        for (&(row, _), s) in rows.rows.iter().zip(sampling) {
            temperature[row] = s.temperature;
            top_k[row] = s.top_k.min(i32::MAX as u32) as i32;
            top_p[row] = s.top_p;
            uniforms[row] = s.uniform.clamp(0.0, 1.0 - f32::EPSILON);
        }
        let st = self.gpu.stream.clone();
        if let Some(masks) = masks {
            self.apply_masks(&rows, masks)?;
        }
        let b = &mut self.bufs;
        st.memcpy_htod(&temperature, &mut b.temperature)?;
        st.memcpy_htod(&top_k, &mut b.top_k)?;
        st.memcpy_htod(&top_p, &mut b.top_p)?;
        st.memcpy_htod(&uniforms, &mut b.uniforms)?;
        let settings = launch::SamplingRows {
            temperature: &b.temperature,
            top_k: &b.top_k,
            top_p: &b.top_p,
            uniforms: &b.uniforms,
        };
        launch::sample_top_k_top_p(
            &self.gpu,
            &b.logits,
            &settings,
            &mut b.sampled,
            n,
            self.cfg.vocab_size,
        )?;
        let sampled = st.clone_dtoh(&b.sampled.slice(0..n))?;
        Ok(rows
            .rows
            .iter()
            .map(|&(row, seq)| (seq, sampled[row].max(0) as u32))
            .collect())
    }

    /// The logits of `rows` (`(logits row, batch index)`), copied to the host through pinned
    /// memory in one copy of the rows they span.
    fn host_rows(&mut self, rows: &[(usize, usize)]) -> Result<StepOutput> {
        let vocab = self.cfg.vocab_size;
        let mut out = StepOutput {
            logits: Vec::with_capacity(rows.len() * vocab),
            rows: Vec::new(),
        };
        let span = rows.iter().map(|r| r.0);
        let (Some(first), Some(last)) = (span.clone().min(), span.max()) else {
            return Ok(out);
        };
        let host = self.sampler.logits_rows(
            &self.gpu,
            &self.bufs.logits,
            first,
            last + 1 - first,
            vocab,
        )?;
        for &(row, seq) in rows {
            out.logits
                .extend_from_slice(&host[(row - first) * vocab..][..vocab]);
            out.rows.push(seq);
        }
        Ok(out)
    }

    /// Sets the logits each row's mask disallows to −∞ (rows in `rows` order, one mask each).
    fn apply_masks(&mut self, rows: &StepRows, masks: &[u32]) -> Result<()> {
        let vocab = self.cfg.vocab_size;
        let words = vocab.div_ceil(32);
        if masks.len() != rows.rows.len() * words {
            return Err(Error::Step(format!(
                "{} mask words for {} rows of {words}",
                masks.len(),
                rows.rows.len()
            )));
        }
        // Masks laid out per logits row (rows the step computed but nobody sampled: all allowed).
        let mut by_row = vec![u32::MAX; rows.computed * words];
        for (k, &(row, _)) in rows.rows.iter().enumerate() {
            by_row[row * words..][..words].copy_from_slice(&masks[k * words..][..words]);
        }
        let d_masks = self.gpu.stream.clone_htod(&by_row)?;
        launch::apply_token_mask(
            &self.gpu,
            &mut self.bufs.logits,
            &d_masks,
            rows.computed,
            vocab,
        )?;
        Ok(())
    }

    /// Plans, uploads and runs one step; the logits stay on the device.
    fn run_step(&mut self, batch: &[SeqStep<'_>]) -> Result<StepRows> {
        self.run_step_rows(batch, &[])
    }

    /// Like [`run_step`](Self::run_step), with a logits row for every token of the entries
    /// whose `every_row[i]` is set. A verify chunk runs several tokens, so its step takes the
    /// prefill path without graphs: the chunk attention gives each row its own causal length.
    fn run_step_rows(&mut self, batch: &[SeqStep<'_>], every_row: &[bool]) -> Result<StepRows> {
        let mut plan = plan_step_rows(batch, every_row, &self.limits).map_err(Error::Step)?;
        let key = graph_key(
            plan.num_seqs(),
            plan.max_context,
            &self.buckets,
            self.max_model_len,
        );
        match key.filter(|_| plan.decode_only) {
            Some(key) => self.run_decode(&mut plan, key),
            None => self.run_prefill(&plan),
        }
    }

    fn run_decode(&mut self, plan: &mut StepPlan, key: GraphKey) -> Result<StepRows> {
        let rows = plan.logit_seqs.iter().map(|&s| (s, s)).collect();
        pad_decode(plan, key.batch, self.limits.max_blocks_per_seq);
        self.bufs.upload(&self.gpu, plan, &[])?;
        let split = decode_split(
            key.batch,
            self.cfg.num_kv_heads,
            key.context,
            self.gpu.info.sm_count,
        );
        if key.batch * split.splits > self.split_rows {
            return Err(Error::Step(format!(
                "decode split {split:?} of {} rows exceeds the buffers",
                key.batch
            )));
        }
        let shape = self.shape(
            key.batch,
            key.batch,
            AttentionKind::Decode(split),
            key.batch,
        );
        if let Some(graph) = self.graphs.get(&key) {
            graph.0.launch()?;
        } else {
            // The first step of a shape runs eagerly (its output is this step's), which also
            // loads every kernel and cuBLAS algorithm before the capture records the launches.
            self.encode(&shape)?;
            if self.opts.cuda_graphs {
                let graph = DecodeGraph(self.capture(&shape)?);
                self.graphs.insert(key, graph);
            }
        }
        Ok(StepRows {
            rows,
            computed: key.batch,
        })
    }

    fn run_prefill(&mut self, plan: &StepPlan) -> Result<StepRows> {
        // The one-token sequences lead the plan; they go through the decode kernel when their
        // split fits, and the prefill kernel covers the rest.
        let decode = mixed_decode(
            plan,
            self.cfg.num_kv_heads,
            self.gpu.info.sm_count,
            self.split_rows,
        );
        let skip = decode.map_or(0, |(seqs, _)| seqs);
        let tile_tokens = forward::tile_tokens(&self.cfg, self.opts.prefill_attention);
        let tiles: Vec<_> = prefill_tiles(&plan.seq_rows, tile_tokens)
            .into_iter()
            .filter(|t| t.seq as usize >= skip)
            .collect();
        self.bufs.upload(&self.gpu, plan, &tiles)?;
        let attention = AttentionKind::Prefill {
            tiles: tiles.len(),
            decode,
        };
        let shape = self.shape(
            plan.num_tokens(),
            plan.num_seqs(),
            attention,
            plan.logit_rows.len(),
        );
        self.encode(&shape)?;
        let rows = plan
            .logit_seqs
            .iter()
            .enumerate()
            .map(|(row, &s)| (row, s))
            .collect();
        Ok(StepRows {
            rows,
            computed: plan.logit_rows.len(),
        })
    }

    fn shape(
        &self,
        tokens: usize,
        seqs: usize,
        attention: AttentionKind,
        logit_rows: usize,
    ) -> StepShape {
        StepShape {
            tokens,
            seqs,
            attention,
            logit_rows,
            max_blocks_per_seq: self.limits.max_blocks_per_seq,
            block_size: self.opts.block_size,
        }
    }

    fn encode(&mut self, shape: &StepShape) -> Result<()> {
        let model = Model {
            gpu: &self.gpu,
            blas: &self.blas,
            cfg: &self.cfg,
            weights: &self.weights,
            cache: &self.cache,
            prefill: self.opts.prefill_attention,
        };
        forward::encode(&model, &mut self.bufs, shape)
    }

    /// Captures one decode step of `shape` into a graph (the capture is always ended, also
    /// when enqueueing failed, so the stream never stays in capture mode).
    fn capture(&mut self, shape: &StepShape) -> Result<CudaGraph> {
        let stream = self.gpu.stream.clone();
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let encoded = self.encode(shape);
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        encoded?;
        graph?.ok_or_else(|| Error::Driver("graph capture produced no graph".into()))
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn model_config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn block_size(&self) -> usize {
        self.opts.block_size
    }

    fn num_kv_blocks(&self) -> usize {
        self.limits.num_blocks
    }

    fn forward(&mut self, batch: &[SeqStep<'_>]) -> crate::Result<StepOutput> {
        let rows = self.run_step(batch)?;
        Ok(self.host_rows(&rows.rows)?)
    }

    fn samples_on_device(&self) -> bool {
        true
    }

    fn forward_sampled(
        &mut self,
        batch: &[SeqStep<'_>],
        device: &[Option<DeviceRow>],
    ) -> crate::Result<SampledStep> {
        let rows = self.run_step(batch)?;
        let (plan, taken) = layout(&rows.rows, device, rows.computed);
        Ok(self.sample_laid_out(&rows, &plan, &taken)?)
    }

    fn verifies_drafts(&self) -> bool {
        true
    }

    fn max_draft_tokens(&self) -> usize {
        self.limits
            .max_logit_rows
            .saturating_sub(self.limits.max_seqs)
    }

    /// Draft verification only (prompt logprobs stay refused: `computes_every_row` is false,
    /// as a prompt chunk's rows would not fit the logits buffers).
    fn forward_every_row(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
    ) -> crate::Result<StepOutput> {
        Ok(self.forward_sampled_rows(batch, every_row, &[])?.output)
    }

    fn forward_sampled_rows(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
        device: &[Vec<DeviceRow>],
    ) -> crate::Result<SampledStep> {
        let rows = self.run_step_rows(batch, every_row)?;
        let (plan, taken) = layout_rows(&rows.rows, device, rows.computed);
        Ok(self.sample_laid_out(&rows, &plan, &taken)?)
    }
}

impl CudaBackend {
    /// Brings back the logits of the wanted rows not in `taken`, then samples `taken` on the
    /// device by `plan`.
    fn sample_laid_out(
        &mut self,
        rows: &StepRows,
        plan: &Layout,
        taken: &[(usize, usize)],
    ) -> Result<SampledStep> {
        let host: Vec<(usize, usize)> = rows
            .rows
            .iter()
            .filter(|r| !taken.contains(r))
            .copied()
            .collect();
        // The host's rows first: sampling turns the device's rows into weights in place.
        let output = self.host_rows(&host)?;
        let vocab = self.cfg.vocab_size;
        let (sampled, logprobs) =
            self.sampler
                .sample(&self.gpu, &mut self.bufs.logits, plan, taken, vocab)?;
        Ok(SampledStep {
            output,
            sampled,
            logprobs,
        })
    }
}

/// Logits rows the buffers hold: one per sequence, and [`DRAFT_ROWS_PER_SEQ`] draft rows
/// per sequence, never more than a step's tokens.
fn verify_rows(max_seqs: usize, max_tokens: usize) -> usize {
    max_seqs.max((max_seqs * (1 + DRAFT_ROWS_PER_SEQ)).min(max_tokens))
}
