//! `attention_decode.cu`, `attention_prefill.cu` and `attention_prefill_mma.cu`: paged
//! attention of new queries over the KV cache (split-K decode plus its merge, and tiled causal
//! prefill, naive or on tensor cores).

use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use super::{grid, int, need};
use crate::backend::cuda::geometry::{DecodeSplit, QueryTile};
use crate::backend::cuda::prefill::{PREFILL_THREADS, PrefillAttention};
use crate::backend::cuda::{Gpu, Result};

/// What both attention kernels read: the step's qkv rows, one layer's cache and the block
/// tables, with their shapes.
pub struct Attend<'a> {
    /// `[rows, (heads + 2 kv_heads) * head_dim]`: q heads first.
    pub qkv: &'a CudaSlice<f32>,
    /// `[cache_blocks, kv_heads, block_size, head_dim]` each.
    pub k_cache: &'a CudaSlice<bf16>,
    pub v_cache: &'a CudaSlice<bf16>,
    /// `[seqs, max_blocks_per_seq]`
    pub block_tables: &'a CudaSlice<i32>,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub max_blocks_per_seq: usize,
    pub cache_blocks: usize,
}

impl Attend<'_> {
    fn row_stride(&self) -> usize {
        (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
    }

    /// The buffers every launch reads, for `rows` qkv rows and `seqs` tables.
    fn inputs(&self, rows: usize, seqs: usize) -> [(&'static str, usize, usize); 4] {
        let cache = self.cache_blocks * self.num_kv_heads * self.block_size * self.head_dim;
        [
            ("qkv", self.qkv.len(), rows * self.row_stride()),
            ("k_cache", self.k_cache.len(), cache),
            ("v_cache", self.v_cache.len(), cache),
            (
                "block_tables",
                self.block_tables.len(),
                seqs * self.max_blocks_per_seq,
            ),
        ]
    }

    /// `row_stride, num_heads, num_kv_heads, head_dim, block_size, max_blocks_per_seq`.
    fn ints(&self) -> Result<[i32; 6]> {
        Ok([
            int(self.row_stride(), "row stride")?,
            int(self.num_heads, "heads")?,
            int(self.num_kv_heads, "kv heads")?,
            int(self.head_dim, "head size")?,
            int(self.block_size, "block size")?,
            int(self.max_blocks_per_seq, "blocks per sequence")?,
        ])
    }
}

/// The decode launch's own buffers: partial results per split, and the context lengths.
pub struct DecodeArgs<'a> {
    pub part_out: &'a mut CudaSlice<f32>, // [seqs, heads, splits, head_dim]
    pub part_max: &'a mut CudaSlice<f32>, // [seqs, heads, splits]
    pub part_sum: &'a mut CudaSlice<f32>, // [seqs, heads, splits]
    pub context_lens: &'a CudaSlice<i32>, // [seqs]
    pub seqs: usize,
    pub split: DecodeSplit,
    pub scale: f32,
}

/// Split-K paged decode: one query token per sequence (`qkv` row s of sequence s), its
/// context read through the block tables, partial softmax results per split.
pub fn attention_decode(gpu: &Gpu, a: &Attend<'_>, d: DecodeArgs<'_>) -> Result<()> {
    let rows = d.seqs * a.num_heads * d.split.splits;
    let mut buffers = a.inputs(d.seqs, d.seqs).to_vec();
    buffers.extend([
        ("part_out", d.part_out.len(), rows * a.head_dim),
        ("part_max", d.part_max.len(), rows),
        ("part_sum", d.part_sum.len(), rows),
        ("context_lens", d.context_lens.len(), d.seqs),
    ]);
    need("attention_decode", &buffers)?;
    if rows == 0 {
        return Ok(());
    }
    let i = a.ints()?;
    let partition = int(d.split.partition_tokens, "partition")?;
    let f = gpu.function("attention_decode")?;
    // SAFETY: (float*, float*, float*, const float*, const bf16*, const bf16*, const int*,
    // const int*, int × 7, float) as in attention_decode.cu. Block (s, h, k) reads row s of
    // `qkv`, table row s, context_lens[s] and cache blocks named by the host-validated table,
    // and writes the (s, heads of h, k) partial entries: all inside the sizes checked above.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(d.part_out)
            .arg(d.part_max)
            .arg(d.part_sum)
            .arg(a.qkv)
            .arg(a.k_cache)
            .arg(a.v_cache)
            .arg(a.block_tables)
            .arg(d.context_lens)
            .arg(&i[0])
            .arg(&i[1])
            .arg(&i[2])
            .arg(&i[3])
            .arg(&i[4])
            .arg(&i[5])
            .arg(&partition)
            .arg(&d.scale)
            .launch(grid(d.seqs, a.num_kv_heads, d.split.splits, 128)?)
    }?;
    Ok(())
}

/// Combines the splits' partial results of `seqs` sequences into `out`.
#[allow(clippy::too_many_arguments)]
pub fn attention_merge(
    gpu: &Gpu,
    out: &mut CudaSlice<bf16>, // [seqs, heads * head_dim]
    part_out: &CudaSlice<f32>, // [seqs, heads, splits, head_dim]
    part_max: &CudaSlice<f32>, // [seqs, heads, splits]
    part_sum: &CudaSlice<f32>,
    seqs: usize,
    num_heads: usize,
    head_dim: usize,
    splits: usize,
) -> Result<()> {
    let rows = seqs * num_heads * splits;
    need(
        "attention_merge",
        &[
            ("out", out.len(), seqs * num_heads * head_dim),
            ("part_out", part_out.len(), rows * head_dim),
            ("part_max", part_max.len(), rows),
            ("part_sum", part_sum.len(), rows),
        ],
    )?;
    if rows == 0 {
        return Ok(());
    }
    let (nh, hd, sp) = (
        int(num_heads, "heads")?,
        int(head_dim, "head size")?,
        int(splits, "splits")?,
    );
    let f = gpu.function("attention_merge")?;
    // SAFETY: (bf16*, const float*, const float*, const float*, int, int, int) as in
    // attention_decode.cu. Block (s, h) reads the `splits` partial entries of (s, h) and writes
    // head h of row s of `out`: inside the sizes checked above.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(out)
            .arg(part_out)
            .arg(part_max)
            .arg(part_sum)
            .arg(&nh)
            .arg(&hd)
            .arg(&sp)
            .launch(grid(seqs, num_heads, 1, 128)?)
    }?;
    Ok(())
}

/// The prefill launch's own buffers.
pub struct PrefillArgs<'a> {
    pub out: &'a mut CudaSlice<bf16>,    // [tokens, heads * head_dim]
    pub tiles: &'a CudaSlice<QueryTile>, // [num_tiles]
    pub num_tiles: usize,
    pub tokens: usize,
    pub seqs: usize,
    pub scale: f32,
    /// Which kernel runs (the tiles must be cut for it: `PrefillAttention::tile_tokens`).
    pub kernel: PrefillAttention,
}

/// Causal attention of prefill query tiles (each within one sequence) over the cache, which
/// already holds the tiles' own keys and values.
pub fn attention_prefill(gpu: &Gpu, a: &Attend<'_>, p: PrefillArgs<'_>) -> Result<()> {
    let mut buffers = a.inputs(p.tokens, p.seqs).to_vec();
    buffers.extend([
        ("out", p.out.len(), p.tokens * a.num_heads * a.head_dim),
        ("tiles", p.tiles.len(), p.num_tiles),
    ]);
    need("attention_prefill", &buffers)?;
    if p.num_tiles == 0 {
        return Ok(());
    }
    let i = a.ints()?;
    let f = gpu.function(p.kernel.function(a.head_dim))?;
    // SAFETY: (bf16*, const float*, const bf16*, const bf16*, const int*, const QueryTile*,
    // int × 6, float) as in attention_prefill.cu and attention_prefill_mma.cu (QueryTile is
    // their repr(C) twin; `function` names the MMA kernel only for the head dimensions it has
    // an instance for). Block (k, h) reads tile k, whose rows lie below `tokens` and whose
    // sequence indexes a table row (the host-built tiles of a validated plan, cut for this
    // kernel), and writes those rows of `out`.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(p.out)
            .arg(a.qkv)
            .arg(a.k_cache)
            .arg(a.v_cache)
            .arg(a.block_tables)
            .arg(p.tiles)
            .arg(&i[0])
            .arg(&i[1])
            .arg(&i[2])
            .arg(&i[3])
            .arg(&i[4])
            .arg(&i[5])
            .arg(&p.scale)
            .launch(grid(p.num_tiles, a.num_kv_heads, 1, PREFILL_THREADS)?)
    }?;
    Ok(())
}
