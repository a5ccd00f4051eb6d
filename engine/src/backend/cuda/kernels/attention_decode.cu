// attention_decode.cu: paged attention for decode (one new query token per sequence).
//
// One thread block per (sequence, kv head, split). It loads each KV tile of its split once
// into shared memory and uses it for all query heads of the GQA group, keeping an online
// softmax per head. Long contexts are split across blocks (gridDim.z); `attention_merge`
// combines the splits' partial results with their running max and sum.

#define DEC_THREADS 128
#define DEC_TILE WARP_SIZE    // tokens per shared-memory tile: one lane per token
#define DEC_MAX_HD 256
#define DEC_MAX_GHD 1024      // group size * head_dim held per block
#define DEC_MAX_GROUP 16
#define DEC_ACC (DEC_MAX_GHD / DEC_THREADS)

// grid: (seqs, num_kv_heads, splits), block: DEC_THREADS.
extern "C" __global__ void __launch_bounds__(DEC_THREADS) attention_decode(
    float* __restrict__ part_out,        // [seqs, num_heads, splits, head_dim], unnormalised
    float* __restrict__ part_max,        // [seqs, num_heads, splits]
    float* __restrict__ part_sum,        // [seqs, num_heads, splits]
    const float* __restrict__ qkv,       // [seqs, row_stride]: q heads first
    const bf16* __restrict__ k_cache,    // [blocks, kv_heads, block_size, head_dim]
    const bf16* __restrict__ v_cache,
    const int* __restrict__ block_tables,  // [seqs, max_blocks_per_seq]
    const int* __restrict__ context_lens,  // [seqs]
    int row_stride, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks_per_seq, int partition_tokens, float scale)
{
    __shared__ float q_s[DEC_MAX_GHD];
    __shared__ __align__(16) bf16 k_s[DEC_TILE * (DEC_MAX_HD + 2)];
    __shared__ __align__(16) bf16 v_s[DEC_TILE * DEC_MAX_HD];
    __shared__ float s_s[DEC_MAX_GROUP * DEC_TILE];
    __shared__ float m_s[DEC_MAX_GROUP], l_s[DEC_MAX_GROUP], alpha_s[DEC_MAX_GROUP];

    const int seq = blockIdx.x, h = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
    const int group = num_heads / num_kv_heads;
    const int ctx = context_lens[seq];
    const int start = split * partition_tokens;
    const int end = min(ctx, start + partition_tokens);
    const int* table = block_tables + (size_t)seq * max_blocks_per_seq;
    const int ghd = group * head_dim;

    const float* q = qkv + (size_t)seq * row_stride + (size_t)h * group * head_dim;
    for (int i = threadIdx.x; i < ghd; i += blockDim.x) q_s[i] = q[i] * scale;
    if (threadIdx.x < group) { m_s[threadIdx.x] = -INFINITY; l_s[threadIdx.x] = 0.0f; }
    float acc[DEC_ACC];
#pragma unroll
    for (int a = 0; a < DEC_ACC; ++a) acc[a] = 0.0f;
    __syncthreads();

    for (int t0 = start; t0 < end; t0 += DEC_TILE) {
        load_kv_tile(k_s, v_s, k_cache, v_cache, table, t0, DEC_TILE, end, h, num_kv_heads,
                     block_size, head_dim, head_dim + 2, head_dim);
        __syncthreads();
        // Scores: one (head, token) pair per thread at a time.
        for (int idx = threadIdx.x; idx < group * DEC_TILE; idx += blockDim.x) {
            const int g = idx / DEC_TILE, j = idx % DEC_TILE;
            s_s[idx] = (t0 + j < end)
                ? dot_q_k(q_s + g * head_dim, k_s + j * (head_dim + 2), head_dim) : -INFINITY;
        }
        __syncthreads();
        tile_softmax<DEC_THREADS>(s_s, m_s, l_s, alpha_s, group);
        __syncthreads();
        tile_accumulate<DEC_ACC, DEC_THREADS>(acc, s_s, v_s, alpha_s, group, head_dim);
        __syncthreads();
    }

    // Write this split's partial result (an empty split writes max = -inf, sum = 0).
#pragma unroll
    for (int a = 0; a < DEC_ACC; ++a) {
        const int idx = threadIdx.x + a * DEC_THREADS;
        if (idx < ghd) {
            const int g = idx / head_dim, d = idx % head_dim;
            const int head = h * group + g;
            part_out[(((size_t)seq * num_heads + head) * splits + split) * head_dim + d] = acc[a];
        }
    }
    if (threadIdx.x < group) {
        const int head = h * group + threadIdx.x;
        const size_t at = ((size_t)seq * num_heads + head) * splits + split;
        part_max[at] = m_s[threadIdx.x];
        part_sum[at] = l_s[threadIdx.x];
    }
}

// grid: (seqs, num_heads), block: 128. out = Σ_s acc_s·e^(m_s−M) / Σ_s l_s·e^(m_s−M).
extern "C" __global__ void attention_merge(
    bf16* __restrict__ out,               // [seqs, num_heads * head_dim]
    const float* __restrict__ part_out,   // [seqs, num_heads, splits, head_dim]
    const float* __restrict__ part_max,   // [seqs, num_heads, splits]
    const float* __restrict__ part_sum,
    int num_heads, int head_dim, int splits)
{
    const int seq = blockIdx.x, head = blockIdx.y;
    const size_t base = ((size_t)seq * num_heads + head) * splits;
    float m = -INFINITY;
    for (int s = 0; s < splits; ++s) m = fmaxf(m, part_max[base + s]);
    float total = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float ms = part_max[base + s];
        if (ms != -INFINITY) total += part_sum[base + s] * __expf(ms - m);
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float ms = part_max[base + s];
            if (ms != -INFINITY) v += part_out[(base + s) * head_dim + d] * __expf(ms - m);
        }
        out[((size_t)seq * num_heads + head) * head_dim + d] = f2bf(v * inv);
    }
}
