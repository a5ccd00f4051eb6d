//! Paged KV storage: per layer, keys and values as `[num_blocks, block_size, kv_heads,
//! head_dim]` f32. Block ids come from the scheduler's block tables; this only stores.

/// The KV cache tensors of every layer.
#[derive(Debug)]
pub(super) struct KvStore {
    pub block_size: usize,
    pub num_blocks: usize,
    /// Floats per token slot: `kv_heads * head_dim`.
    pub kv_dim: usize,
    /// Per layer: `[num_blocks, block_size, kv_dim]`.
    pub keys: Vec<Vec<f32>>,
    /// Per layer: `[num_blocks, block_size, kv_dim]`.
    pub values: Vec<Vec<f32>>,
}

impl KvStore {
    /// Zeroed storage; `None` when the size overflows.
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        kv_dim: usize,
    ) -> Option<Self> {
        let per_layer = num_blocks.checked_mul(block_size)?.checked_mul(kv_dim)?;
        let layer = || vec![0f32; per_layer];
        Some(Self {
            block_size,
            num_blocks,
            kv_dim,
            keys: (0..num_layers).map(|_| layer()).collect(),
            values: (0..num_layers).map(|_| layer()).collect(),
        })
    }

    /// Offset of position `pos` of a sequence with `block_table` into a layer's storage.
    #[inline]
    pub fn slot_offset(&self, block_table: &[u32], pos: usize) -> usize {
        let block = block_table[pos / self.block_size] as usize;
        (block * self.block_size + pos % self.block_size) * self.kv_dim
    }
}
