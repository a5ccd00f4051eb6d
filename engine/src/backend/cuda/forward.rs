//! The forward pass on the device: fixed activation buffers, and the kernel sequence of one
//! step. The same `encode` enqueues a step eagerly or into a CUDA graph being captured, so
//! every argument it passes points at a buffer that outlives the graph.

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use half::bf16;

use super::Result;
use super::device::Gpu;
use super::gemm::linear;
use super::geometry::{DecodeSplit, QueryTile, prefill_tile_tokens};
use super::plan::StepPlan;
use super::weights::DeviceWeights;
use crate::model::{ModelConfig, RopeLayout};

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
    pub logit_rows: CudaSlice<i32>,   // [seqs]
    residual: CudaSlice<f32>,         // [tokens, hidden]
    normed: CudaSlice<bf16>,          // [tokens, hidden]
    qkv: CudaSlice<f32>,              // [tokens, (heads + 2 kv_heads) * head_dim]
    attn: CudaSlice<bf16>,            // [tokens, heads * head_dim]
    proj: CudaSlice<f32>,             // [tokens, hidden]
    gate_up: CudaSlice<f32>,          // [tokens, 2 * ffn]
    act: CudaSlice<bf16>,             // [tokens, ffn]
    head_in: CudaSlice<bf16>,         // [seqs, hidden]
    pub logits: CudaSlice<f32>,       // [seqs, vocab]
    part_out: CudaSlice<f32>,         // [split rows, heads, head_dim]
    part_max: CudaSlice<f32>,         // [split rows, heads]
    part_sum: CudaSlice<f32>,         // [split rows, heads]
    pub sampled: CudaSlice<i32>,      // [seqs]
    pub temperature: CudaSlice<f32>,  // [seqs]
    pub top_k: CudaSlice<i32>,        // [seqs]
    pub top_p: CudaSlice<f32>,        // [seqs]
    pub uniforms: CudaSlice<f32>,     // [seqs]
}

/// Sizes the buffers are allocated for.
#[derive(Debug, Clone, Copy)]
pub struct BufferSizes {
    pub max_tokens: usize,
    pub max_seqs: usize,
    pub max_blocks_per_seq: usize,
    /// Most (sequence × split) pairs of any decode launch.
    pub max_split_rows: usize,
}

impl Buffers {
    /// Allocates every buffer (zeroed).
    pub fn new(gpu: &Gpu, cfg: &ModelConfig, s: BufferSizes) -> Result<Self> {
        let st = &gpu.stream;
        let (t, n) = (s.max_tokens, s.max_seqs);
        let (h, hd, nh) = (cfg.hidden_size, cfg.head_dim, cfg.num_heads);
        Ok(Self {
            ids: st.alloc_zeros(t)?,
            positions: st.alloc_zeros(t)?,
            slots: st.alloc_zeros(t)?,
            block_tables: st.alloc_zeros(n * s.max_blocks_per_seq)?,
            context_lens: st.alloc_zeros(n)?,
            tiles: st.alloc_zeros(t)?,
            logit_rows: st.alloc_zeros(n)?,
            residual: st.alloc_zeros(t * h)?,
            normed: st.alloc_zeros(t * h)?,
            qkv: st.alloc_zeros(t * (nh + 2 * cfg.num_kv_heads) * hd)?,
            attn: st.alloc_zeros(t * nh * hd)?,
            proj: st.alloc_zeros(t * h)?,
            gate_up: st.alloc_zeros(t * 2 * cfg.ffn_size)?,
            act: st.alloc_zeros(t * cfg.ffn_size)?,
            head_in: st.alloc_zeros(n * h)?,
            logits: st.alloc_zeros(n * cfg.vocab_size)?,
            part_out: st.alloc_zeros(s.max_split_rows * nh * hd)?,
            part_max: st.alloc_zeros(s.max_split_rows * nh)?,
            part_sum: st.alloc_zeros(s.max_split_rows * nh)?,
            sampled: st.alloc_zeros(n)?,
            temperature: st.alloc_zeros(n)?,
            top_k: st.alloc_zeros(n)?,
            top_p: st.alloc_zeros(n)?,
            uniforms: st.alloc_zeros(n)?,
        })
    }

    /// Copies a plan's inputs into the step-input buffers.
    pub fn upload(&mut self, gpu: &Gpu, plan: &StepPlan, tiles: &[QueryTile]) -> Result<()> {
        let st = &gpu.stream;
        st.memcpy_htod(&plan.token_ids, &mut self.ids)?;
        st.memcpy_htod(&plan.positions, &mut self.positions)?;
        st.memcpy_htod(&plan.slots, &mut self.slots)?;
        st.memcpy_htod(&plan.block_tables, &mut self.block_tables)?;
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
    /// Any tokens: the prefill kernel over `tiles` query tiles.
    Prefill { tiles: usize },
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
}

fn grid(x: usize, y: usize, z: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (x as u32, y as u32, z as u32),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Enqueues one whole step: embeddings, every layer, final norm, output head.
pub fn encode(m: &Model<'_>, b: &mut Buffers, shape: &StepShape) -> Result<()> {
    let (cfg, st) = (m.cfg, &m.gpu.stream);
    let (t, h) = (shape.tokens, cfg.hidden_size);
    let (hidden, vocab) = (h as i32, cfg.vocab_size as i32);
    let f = m.gpu.function("embedding_gather")?;
    // SAFETY (every launch in this file): the arguments match the kernel's parameter list in
    // `kernels/*.cu` one for one, and every buffer holds at least the elements the grid
    // touches (`Buffers` is sized for the largest step; `plan_step` enforces the limits).
    unsafe {
        st.launch_builder(f)
            .arg(&mut b.residual)
            .arg(&m.weights.embed)
            .arg(&b.ids)
            .arg(&hidden)
            .arg(&vocab)
            .launch(grid(t, 1, 1, 256))
    }?;
    for (l, layer) in m.weights.layers.iter().enumerate() {
        rmsnorm(m, b, t, &layer.attn_norm, l > 0)?;
        let qkv_dim = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim;
        linear(m.blas, st, &b.normed, &layer.qkv, &mut b.qkv, t, h, qkv_dim)?;
        rope_and_cache(m, b, shape, l)?;
        attention(m, b, shape, l)?;
        linear(
            m.blas,
            st,
            &b.attn,
            &layer.o,
            &mut b.proj,
            t,
            cfg.num_heads * cfg.head_dim,
            h,
        )?;
        rmsnorm(m, b, t, &layer.ffn_norm, true)?;
        linear(
            m.blas,
            st,
            &b.normed,
            &layer.gate_up,
            &mut b.gate_up,
            t,
            h,
            2 * cfg.ffn_size,
        )?;
        let (tokens, ffn) = (t as i32, cfg.ffn_size as i32);
        let f = m.gpu.function("silu_mul")?;
        unsafe {
            st.launch_builder(f)
                .arg(&b.gate_up)
                .arg(&mut b.act)
                .arg(&tokens)
                .arg(&ffn)
                .launch(grid((t * cfg.ffn_size).div_ceil(256), 1, 1, 256))
        }?;
        linear(
            m.blas,
            st,
            &b.act,
            &layer.down,
            &mut b.proj,
            t,
            cfg.ffn_size,
            h,
        )?;
    }
    rmsnorm(m, b, t, &m.weights.final_norm, !m.weights.layers.is_empty())?;
    if shape.logit_rows == 0 {
        return Ok(());
    }
    // Only the rows whose logits are wanted go through the (large) output head.
    let f = m.gpu.function("gather_rows")?;
    unsafe {
        st.launch_builder(f)
            .arg(&mut b.head_in)
            .arg(&b.normed)
            .arg(&b.logit_rows)
            .arg(&hidden)
            .launch(grid(shape.logit_rows, 1, 1, 256))
    }?;
    linear(
        m.blas,
        st,
        &b.head_in,
        m.weights.head(),
        &mut b.logits,
        shape.logit_rows,
        h,
        cfg.vocab_size,
    )?;
    Ok(())
}

/// `residual += proj` (when `add`), then `normed = rmsnorm(residual) * weight`.
fn rmsnorm(
    m: &Model<'_>,
    b: &mut Buffers,
    t: usize,
    weight: &CudaSlice<f32>,
    add: bool,
) -> Result<()> {
    let (hidden, eps) = (m.cfg.hidden_size as i32, m.cfg.rms_norm_eps);
    let f = m.gpu.function("rmsnorm_residual")?;
    let st = &m.gpu.stream;
    let mut launch = st.launch_builder(f);
    launch.arg(&mut b.residual);
    let null: u64 = 0;
    if add {
        launch.arg(&b.proj)
    } else {
        launch.arg(&null)
    };
    launch.arg(weight).arg(&mut b.normed).arg(&hidden).arg(&eps);
    unsafe { launch.launch(grid(t, 1, 1, 256)) }?;
    Ok(())
}

/// RoPE on q and k in place, then k and v into layer `l`'s cache slots.
fn rope_and_cache(m: &Model<'_>, b: &mut Buffers, shape: &StepShape, l: usize) -> Result<()> {
    let cfg = m.cfg;
    let (nh, nkv, hd) = (
        cfg.num_heads as i32,
        cfg.num_kv_heads as i32,
        cfg.head_dim as i32,
    );
    let st = &m.gpu.stream;
    let rope = match cfg.rope_layout {
        RopeLayout::Adjacent => "rope_adjacent",
        RopeLayout::HalfSplit => "rope_half_split",
    };
    let f = m.gpu.function(rope)?;
    unsafe {
        st.launch_builder(f)
            .arg(&mut b.qkv)
            .arg(&b.positions)
            .arg(&nh)
            .arg(&nkv)
            .arg(&hd)
            .arg(&cfg.rope_base)
            .launch(grid(shape.tokens, 1, 1, 128))
    }?;
    let bs = shape.block_size as i32;
    let cache = &m.cache[l];
    let f = m.gpu.function("kv_cache_write")?;
    // The cache is written through shared references: cudarc only needs the pointer, and no
    // other work reads it concurrently on this single stream.
    unsafe {
        st.launch_builder(f)
            .arg(&b.qkv)
            .arg(&cache.k)
            .arg(&cache.v)
            .arg(&b.slots)
            .arg(&nh)
            .arg(&nkv)
            .arg(&hd)
            .arg(&bs)
            .launch(grid(shape.tokens, 1, 1, 128))
    }?;
    Ok(())
}

/// Attention of layer `l` into `b.attn`.
fn attention(m: &Model<'_>, b: &mut Buffers, shape: &StepShape, l: usize) -> Result<()> {
    let cfg = m.cfg;
    let st = &m.gpu.stream;
    let (nh, nkv, hd) = (
        cfg.num_heads as i32,
        cfg.num_kv_heads as i32,
        cfg.head_dim as i32,
    );
    let row_stride = (cfg.num_heads + 2 * cfg.num_kv_heads) as i32 * hd;
    let (bs, mb) = (shape.block_size as i32, shape.max_blocks_per_seq as i32);
    let scale = 1.0 / (cfg.head_dim as f32).sqrt();
    let cache = &m.cache[l];
    match shape.attention {
        AttentionKind::Decode(split) => {
            let (splits, partition) = (split.splits as i32, split.partition_tokens as i32);
            let f = m.gpu.function("attention_decode")?;
            unsafe {
                st.launch_builder(f)
                    .arg(&mut b.part_out)
                    .arg(&mut b.part_max)
                    .arg(&mut b.part_sum)
                    .arg(&b.qkv)
                    .arg(&cache.k)
                    .arg(&cache.v)
                    .arg(&b.block_tables)
                    .arg(&b.context_lens)
                    .arg(&row_stride)
                    .arg(&nh)
                    .arg(&nkv)
                    .arg(&hd)
                    .arg(&bs)
                    .arg(&mb)
                    .arg(&partition)
                    .arg(&scale)
                    .launch(grid(shape.seqs, cfg.num_kv_heads, split.splits, 128))
            }?;
            let f = m.gpu.function("attention_merge")?;
            unsafe {
                st.launch_builder(f)
                    .arg(&mut b.attn)
                    .arg(&b.part_out)
                    .arg(&b.part_max)
                    .arg(&b.part_sum)
                    .arg(&nh)
                    .arg(&hd)
                    .arg(&splits)
                    .launch(grid(shape.seqs, cfg.num_heads, 1, 128))
            }?;
        }
        AttentionKind::Prefill { tiles } => {
            let f = m.gpu.function("attention_prefill")?;
            unsafe {
                st.launch_builder(f)
                    .arg(&mut b.attn)
                    .arg(&b.qkv)
                    .arg(&cache.k)
                    .arg(&cache.v)
                    .arg(&b.block_tables)
                    .arg(&b.tiles)
                    .arg(&row_stride)
                    .arg(&nh)
                    .arg(&nkv)
                    .arg(&hd)
                    .arg(&bs)
                    .arg(&mb)
                    .arg(&scale)
                    .launch(grid(tiles, cfg.num_kv_heads, 1, 128))
            }?;
        }
    }
    Ok(())
}

/// Query tokens per prefill tile for this model.
pub fn tile_tokens(cfg: &ModelConfig) -> usize {
    prefill_tile_tokens(cfg.num_heads / cfg.num_kv_heads.max(1), cfg.head_dim)
}
