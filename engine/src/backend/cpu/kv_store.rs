//! Paged KV storage: per layer, keys and values as `[num_blocks, kv_heads, block_size,
//! head_dim]` (vLLM's per-head layout): one head's slots of one block are contiguous, so
//! attention streams each head's keys and values instead of striding across heads. This only
//! stores; block ids come from the scheduler's block tables.

use half::f16;

/// An element the KV cache stores: `f32` for the reference path, [`F16Bits`] for the fast
/// path (half the memory and half the bytes each decode step streams, as llama.cpp's and
/// vLLM's default f16 caches).
pub(super) trait KvElem: Copy + Send + Sync + 'static {
    /// Zeroed storage of `len` elements (the allocator's zeroed pages, not a write pass).
    fn zeroed(len: usize) -> Vec<Self>;
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
}

impl KvElem for f32 {
    fn zeroed(len: usize) -> Vec<Self> {
        vec![0.0; len]
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

/// The bits of an IEEE half (stored as `u16` so the pool comes from zeroed pages; values are
/// rounded to nearest-even on the way in, the same as F16C's `vcvtps2ph`).
pub(super) type F16Bits = u16;

impl KvElem for F16Bits {
    fn zeroed(len: usize) -> Vec<Self> {
        vec![0; len]
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x).to_bits()
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::from_bits(self).to_f32()
    }
}

/// The KV cache tensors of every layer.
#[derive(Debug)]
pub(super) struct KvStore<T> {
    pub block_size: usize,
    pub num_blocks: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Per layer: `[num_blocks, kv_heads, block_size, head_dim]`.
    pub keys: Vec<Vec<T>>,
    /// Per layer: `[num_blocks, kv_heads, block_size, head_dim]`.
    pub values: Vec<Vec<T>>,
}

impl<T: KvElem> KvStore<T> {
    /// Zeroed storage; `None` when the size overflows.
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        num_kv_heads: usize,
        head_dim: usize,
    ) -> Option<Self> {
        let per_layer = num_blocks
            .checked_mul(block_size)?
            .checked_mul(num_kv_heads)?
            .checked_mul(head_dim)?;
        Some(Self {
            block_size,
            num_blocks,
            num_kv_heads,
            head_dim,
            keys: (0..num_layers).map(|_| T::zeroed(per_layer)).collect(),
            values: (0..num_layers).map(|_| T::zeroed(per_layer)).collect(),
        })
    }

    /// Where head `head`'s `block_size × head_dim` elements of block `block` start.
    #[inline]
    pub fn head_block(&self, block: u32, head: usize) -> usize {
        (block as usize * self.num_kv_heads + head) * self.block_size * self.head_dim
    }

    /// Stores one token's keys and values (`[kv_heads, head_dim]` each) at position `pos` of
    /// the sequence with `block_table`.
    pub fn write(&mut self, layer: usize, block_table: &[u32], pos: usize, k: &[f32], v: &[f32]) {
        let (block, slot) = (block_table[pos / self.block_size], pos % self.block_size);
        let hd = self.head_dim;
        for h in 0..self.num_kv_heads {
            let off = self.head_block(block, h) + slot * hd;
            let (src_k, src_v) = (&k[h * hd..(h + 1) * hd], &v[h * hd..(h + 1) * hd]);
            for (d, &s) in self.keys[layer][off..off + hd].iter_mut().zip(src_k) {
                *d = T::from_f32(s);
            }
            for (d, &s) in self.values[layer][off..off + hd].iter_mut().zip(src_v) {
                *d = T::from_f32(s);
            }
        }
    }
}
