// kv_write.cu: copies each new token's keys and values into its slot of the paged cache.
// Cache layout per layer: [num_blocks, num_kv_heads, block_size, head_dim] (bf16), so that one
// (block, kv head) tile is contiguous for the attention kernels.

// grid: (tokens), block: any. slot = block_id * block_size + offset, from the block table;
// slot < 0 marks a padding row.
extern "C" __global__ void kv_cache_write(
    const float* __restrict__ qkv,     // [tokens, (heads + 2 kv_heads) * head_dim], after RoPE
    bf16* __restrict__ k_cache,        // [blocks, kv_heads, block_size, head_dim]
    bf16* __restrict__ v_cache,        // same
    const int* __restrict__ slots,     // [tokens]
    int num_heads, int num_kv_heads, int head_dim, int block_size)
{
    const int t = blockIdx.x;
    const int slot = slots[t];
    if (slot < 0) return;  // a padding row of a captured graph: writes nothing
    const int block = slot / block_size, offset = slot % block_size;
    const int row_width = (num_heads + 2 * num_kv_heads) * head_dim;
    const float* k_src = qkv + (size_t)t * row_width + num_heads * head_dim;
    const float* v_src = k_src + num_kv_heads * head_dim;
    for (int i = threadIdx.x; i < num_kv_heads * head_dim; i += blockDim.x) {
        const int h = i / head_dim, d = i % head_dim;
        const size_t dst = (((size_t)block * num_kv_heads + h) * block_size + offset) * head_dim + d;
        k_cache[dst] = f2bf(k_src[i]);
        v_cache[dst] = f2bf(v_src[i]);
    }
}
