//! `kv_write.cu`: each new token's keys and values into its slot of the paged cache.

use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use super::{grid, int, need};
use crate::backend::cuda::{Gpu, Result};

/// The cache geometry of a layer: `[num_blocks, num_kv_heads, block_size, head_dim]`.
#[derive(Debug, Clone, Copy)]
pub struct CacheShape {
    pub num_blocks: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
}

/// Writes k and v of `tokens` qkv rows to their `slots` (`block * block_size + offset`, or
/// negative for a padding row). The cache is taken by shared reference: the forward holds the
/// layer caches shared while it enqueues, and a single stream orders every access to them.
pub fn kv_cache_write(
    gpu: &Gpu,
    qkv: &CudaSlice<f32>,      // [tokens, (heads + 2 kv_heads) * head_dim]
    k_cache: &CudaSlice<bf16>, // [blocks, kv_heads, block_size, head_dim]
    v_cache: &CudaSlice<bf16>,
    slots: &CudaSlice<i32>, // [tokens]
    tokens: usize,
    c: CacheShape,
) -> Result<()> {
    let cache = c.num_blocks * c.num_kv_heads * c.block_size * c.head_dim;
    let width = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
    need(
        "kv_cache_write",
        &[
            ("qkv", qkv.len(), tokens * width),
            ("k_cache", k_cache.len(), cache),
            ("v_cache", v_cache.len(), cache),
            ("slots", slots.len(), tokens),
        ],
    )?;
    if tokens == 0 {
        return Ok(());
    }
    let args = [
        int(c.num_heads, "heads")?,
        int(c.num_kv_heads, "kv heads")?,
        int(c.head_dim, "head size")?,
        int(c.block_size, "block size")?,
    ];
    let f = gpu.function("kv_cache_write")?;
    // SAFETY: (const float*, bf16*, bf16*, const int*, int, int, int, int) as in kv_write.cu.
    // Block t reads row t of `qkv` and slots[t]; the slot comes from the host-validated plan
    // (block id < num_blocks), so the write lands inside the caches checked above.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(qkv)
            .arg(k_cache)
            .arg(v_cache)
            .arg(slots)
            .arg(&args[0])
            .arg(&args[1])
            .arg(&args[2])
            .arg(&args[3])
            .launch(grid(tokens, 1, 1, 128)?)
    }?;
    Ok(())
}
