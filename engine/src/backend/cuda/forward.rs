//! The forward pass on the device: fixed activation buffers, and the kernel sequence of one
//! step. The same `encode` enqueues a step eagerly or into a CUDA graph being captured, so
//! every argument it passes points at a buffer that outlives the graph.

use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaSlice;
use half::bf16;

use super::Result;
use super::device::Gpu;
use super::gemm::linear;
use super::geometry::{DecodeSplit, QueryTile};
use super::launch::{self, Attend, CacheShape, DecodeArgs, PrefillArgs, QkvPosition};
use super::plan::StepPlan;
use super::prefill::PrefillAttention;
use super::table_upload::TableMirror;
use super::weights::DeviceWeights;
use crate::model::ModelConfig;

/// Keys and values of one layer: `[num_blocks, kv_heads, block_size, head_dim]` each.
pub struct LayerCache {
    pub k: CudaSlice<bf16>,
    pub v: CudaSlice<bf16>,
}

/// Every activation and step-input buffer, sized once for the largest step.
pub struct Buffers {
    pub ids: CudaSlice<u32>,          // [tokens]
    pub positions: CudaSlice<i32>,    // [tokens]
    pub slots: CudaSlice<i32>,        // [tokens]
    pub block_tables: CudaSlice<i32>, // [seqs, max_blocks_per_seq]
    pub context_lens: CudaSlice<i32>, // [seqs]
    pub tiles: CudaSlice<QueryTile>,  // [tokens]
    pub logit_rows: CudaSlice<i32>,   // [logit rows]
    residual: CudaSlice<f32>,         // [tokens, hidden]
    normed: CudaSlice<bf16>,          // [tokens, hidden]
    qkv: CudaSlice<f32>,              // [tokens, (heads + 2 kv_heads) * head_dim]
    attn: CudaSlice<bf16>,            // [tokens, heads * head_dim]
    proj: CudaSlice<f32>,             // [tokens, hidden]
    gate_up: CudaSlice<f32>,          // [tokens, 2 * ffn]
    act: CudaSlice<bf16>,             // [tokens, ffn]
    head_in: CudaSlice<bf16>,         // [logit rows, hidden]
    pub logits: CudaSlice<f32>,       // [logit rows, vocab]
    part_out: CudaSlice<f32>,         // [split rows, heads, head_dim]
    part_max: CudaSlice<f32>,         // [split rows, heads]
    part_sum: CudaSlice<f32>,         // [split rows, heads]
    pub sampled: CudaSlice<i32>,      // [seqs]
    pub temperature: CudaSlice<f32>,  // [seqs]
    pub top_k: CudaSlice<i32>,        // [seqs]
    pub top_p: CudaSlice<f32>,        // [seqs]
    pub uniforms: CudaSlice<f32>,     // [seqs]
    /// What `block_tables` holds, so a step uploads only the entries that changed.
    tables: TableMirror,
}

/// Sizes the buffers are allocated for.
#[derive(Debug, Clone, Copy)]
pub struct BufferSizes {
    pub max_tokens: usize,
    pub max_seqs: usize,
    /// Logits rows: one per sequence and the draft rows of speculative verify steps.
    pub max_logit_rows: usize,
    pub max_blocks_per_seq: usize,
    /// Most (sequence × split) pairs of any decode launch.
    pub max_split_rows: usize,
}

impl Buffers {
    /// Allocates every buffer (zeroed).
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, s: BufferSizes) -> Result<Self> {
        let st = &gpu.stream;
        let (t, n, r) = (s.max_tokens, s.max_seqs, s.max_logit_rows.max(s.max_seqs));
        let (h, hd, nh) = (cfg.hidden_size, cfg.head_dim, cfg.num_heads);
        Ok(Self {
            ids: st.alloc_zeros(t)?,
            positions: st.alloc_zeros(t)?,
            slots: st.alloc_zeros(t)?,
            block_tables: st.alloc_zeros(n * s.max_blocks_per_seq)?,
            context_lens: st.alloc_zeros(n)?,
            tiles: st.alloc_zeros(t)?,
            logit_rows: st.alloc_zeros(r)?,
            residual: st.alloc_zeros(t * h)?,
            normed: st.alloc_zeros(t * h)?,
            qkv: st.alloc_zeros(t * (nh + 2 * cfg.num_kv_heads) * hd)?,
            attn: st.alloc_zeros(t * nh * hd)?,
            proj: st.alloc_zeros(t * h)?,
            gate_up: st.alloc_zeros(t * 2 * cfg.ffn_size)?,
            act: st.alloc_zeros(t * cfg.ffn_size)?,
            head_in: st.alloc_zeros(r * h)?,
            logits: st.alloc_zeros(r * cfg.vocab_size)?,
            part_out: st.alloc_zeros(s.max_split_rows * nh * hd)?,
            part_max: st.alloc_zeros(s.max_split_rows * nh)?,
            part_sum: st.alloc_zeros(s.max_split_rows * nh)?,
            sampled: st.alloc_zeros(r)?,
            temperature: st.alloc_zeros(r)?,
            top_k: st.alloc_zeros(r)?,
            top_p: st.alloc_zeros(r)?,
            uniforms: st.alloc_zeros(r)?,
            tables: TableMirror::new(n * s.max_blocks_per_seq),
        })
    }

    /// Copies a plan's inputs into the step-input buffers; of the block tables only the entries
    /// that changed since the last step.
    pub fn upload(&mut self, gpu: &Gpu, plan: &StepPlan, tiles: &[QueryTile]) -> Result<()> {
        let st = &gpu.stream;
        st.memcpy_htod(&plan.token_ids, &mut self.ids)?;
        st.memcpy_htod(&plan.positions, &mut self.positions)?;
        st.memcpy_htod(&plan.slots, &mut self.slots)?;
        for range in self.tables.changes(&plan.block_tables) {
            let mut dst = self.block_tables.slice_mut(range.clone());
            if let Err(err) = st.memcpy_htod(&plan.block_tables[range], &mut dst) {
                self.tables.invalidate();
                return Err(err.into());
            }
        }
        st.memcpy_htod(&plan.context_lens, &mut self.context_lens)?;
        st.memcpy_htod(&plan.logit_rows, &mut self.logit_rows)?;
        if !tiles.is_empty() {
            st.memcpy_htod(tiles, &mut self.tiles)?;
        }
        Ok(())
    }
}

/// How attention runs in a step.
#[derive(Debug, Clone, Copy)]
pub enum AttentionKind {
    /// One token per sequence: split-K paged decode + merge.
    Decode(DecodeSplit),
    /// Any tokens: the first `decode.0` sequences (one token each, their token rows their
    /// sequence rows) through the decode kernel split as `decode.1`, the rest through the
    /// prefill kernel over `tiles` query tiles.
    Prefill {
        tiles: usize,
        decode: Option<(usize, DecodeSplit)>,
    },
}

/// The shape of one step's launches.
#[derive(Debug, Clone, Copy)]
pub struct StepShape {
    pub tokens: usize,
    pub seqs: usize,
    pub attention: AttentionKind,
    /// Rows whose logits are computed (entries of `logit_rows`).
    pub logit_rows: usize,
    pub max_blocks_per_seq: usize,
    pub block_size: usize,
}

/// Everything `encode` reads.
pub struct Model<'a> {
    pub gpu: &'a Gpu,
    pub blas: &'a CudaBlas,
    pub cfg: &'a ModelConfig,
    pub weights: &'a DeviceWeights,
    pub cache: &'a [LayerCache],
    /// The prefill attention kernel (`--prefill-attention`).
    pub prefill: PrefillAttention,
}

/// Enqueues one whole step: embeddings, every layer, final norm, output head. Kernels run
/// through the typed launchers (`launch`), which check every buffer against the launch.
pub fn encode(m: &Model<'_>, b: &mut Buffers, shape: &StepShape) -> Result<()> {
    let (cfg, gpu, st) = (m.cfg, m.gpu, &m.gpu.stream);
    let (t, h, eps) = (shape.tokens, cfg.hidden_size, cfg.rms_norm_eps);
    let (q_dim, ffn) = (cfg.q_dim(), cfg.ffn_size);
    let qkv_dim = q_dim + 2 * cfg.kv_dim();
    let w = m.weights;
    launch::embedding_gather(gpu, &mut b.residual, &w.embed, &b.ids, t, h, cfg.vocab_size)?;
    for (l, layer) in w.layers.iter().enumerate() {
        let delta = (l > 0).then_some(&b.proj); // the previous layer's FFN output
        launch::rmsnorm_residual(
            gpu,
            &mut b.residual,
            delta,
            &layer.attn_norm,
            &mut b.normed,
            t,
            h,
            eps,
        )?;
        linear(m.blas, st, &b.normed, &layer.qkv, &mut b.qkv, t, h, qkv_dim)?;
        let position = QkvPosition {
            tokens: t,
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            layout: cfg.rope_layout,
            bias: layer.qkv_bias.as_ref(),
            qk_norm: layer.q_norm.as_ref().zip(layer.k_norm.as_ref()),
            eps,
            inv_freq: &w.rope_inv_freqs,
            rope_scale: cfg.rope_scaling.attention_factor() as f32,
        };
        launch::qkv_position(gpu, &mut b.qkv, &b.positions, &position)?;
        let cache = &m.cache[l];
        launch::kv_cache_write(
            gpu,
            &b.qkv,
            &cache.k,
            &cache.v,
            &b.slots,
            t,
            cache_shape(m, shape),
        )?;
        attention(m, b, shape, l)?;
        linear(m.blas, st, &b.attn, &layer.o, &mut b.proj, t, q_dim, h)?;
        launch::rmsnorm_residual(
            gpu,
            &mut b.residual,
            Some(&b.proj),
            &layer.ffn_norm,
            &mut b.normed,
            t,
            h,
            eps,
        )?;
        linear(
            m.blas,
            st,
            &b.normed,
            &layer.gate_up,
            &mut b.gate_up,
            t,
            h,
            2 * ffn,
        )?;
        launch::silu_mul(gpu, &b.gate_up, &mut b.act, t, ffn)?;
        linear(m.blas, st, &b.act, &layer.down, &mut b.proj, t, ffn, h)?;
    }
    let delta = (!w.layers.is_empty()).then_some(&b.proj);
    launch::rmsnorm_residual(
        gpu,
        &mut b.residual,
        delta,
        &w.final_norm,
        &mut b.normed,
        t,
        h,
        eps,
    )?;
    if shape.logit_rows == 0 {
        return Ok(());
    }
    // Only the rows whose logits are wanted go through the (large) output head.
    launch::gather_rows(
        gpu,
        &mut b.head_in,
        &b.normed,
        &b.logit_rows,
        shape.logit_rows,
        t,
        h,
    )?;
    linear(
        m.blas,
        st,
        &b.head_in,
        w.head(),
        &mut b.logits,
        shape.logit_rows,
        h,
        cfg.vocab_size,
    )?;
    Ok(())
}

/// The geometry of the layer caches.
fn cache_shape(m: &Model<'_>, shape: &StepShape) -> CacheShape {
    let c = m.cfg;
    let per_block = (c.num_kv_heads * shape.block_size * c.head_dim).max(1);
    CacheShape {
        num_blocks: m.cache.first().map_or(0, |l| l.k.len() / per_block),
        num_heads: c.num_heads,
        num_kv_heads: c.num_kv_heads,
        head_dim: c.head_dim,
        block_size: shape.block_size,
    }
}

/// Attention of layer `l` into `b.attn`.
fn attention(m: &Model<'_>, b: &mut Buffers, shape: &StepShape, l: usize) -> Result<()> {
    let (cfg, gpu) = (m.cfg, m.gpu);
    let cache = &m.cache[l];
    let geometry = cache_shape(m, shape);
    let attend = Attend {
        qkv: &b.qkv,
        k_cache: &cache.k,
        v_cache: &cache.v,
        block_tables: &b.block_tables,
        num_heads: cfg.num_heads,
        num_kv_heads: cfg.num_kv_heads,
        head_dim: cfg.head_dim,
        block_size: shape.block_size,
        max_blocks_per_seq: shape.max_blocks_per_seq,
        cache_blocks: geometry.num_blocks,
    };
    let scale = 1.0 / (cfg.head_dim as f32).sqrt();
    let decode = match shape.attention {
        AttentionKind::Decode(split) => Some((shape.seqs, split)),
        AttentionKind::Prefill { decode, .. } => decode,
    };
    if let Some((seqs, split)) = decode {
        let args = DecodeArgs {
            part_out: &mut b.part_out,
            part_max: &mut b.part_max,
            part_sum: &mut b.part_sum,
            context_lens: &b.context_lens,
            seqs,
            split,
            scale,
        };
        launch::attention_decode(gpu, &attend, args)?;
        launch::attention_merge(
            gpu,
            &mut b.attn,
            &b.part_out,
            &b.part_max,
            &b.part_sum,
            seqs,
            cfg.num_heads,
            cfg.head_dim,
            split.splits,
        )?;
    }
    if let AttentionKind::Prefill { tiles, .. } = shape.attention
        && tiles > 0
    {
        let args = PrefillArgs {
            out: &mut b.attn,
            tiles: &b.tiles,
            num_tiles: tiles,
            tokens: shape.tokens,
            seqs: shape.seqs,
            scale,
            kernel: m.prefill,
        };
        launch::attention_prefill(gpu, &attend, args)?;
    }
    Ok(())
}

/// Query tokens per prefill tile for this model and prefill kernel.
pub fn tile_tokens(cfg: &ModelConfig, kernel: PrefillAttention) -> usize {
    kernel.tile_tokens(cfg.num_heads / cfg.num_kv_heads.max(1), cfg.head_dim)
}
