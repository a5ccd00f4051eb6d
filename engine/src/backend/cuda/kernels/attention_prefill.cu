// attention_prefill.cu: causal attention of a prefill chunk over the paged cache.
//
// The chunk's keys and values were written to the cache first, so a chunk that continues a
// prompt (chunked prefill) sees the earlier chunks' keys like its own: query at absolute
// position p attends cache positions 0..=p. One thread block per (query tile, kv head): a
// tile is up to `tile_queries` consecutive tokens of one sequence, times the GQA group, and
// each KV tile is loaded once for all of those query rows.

#define PRE_THREADS 128
#define PRE_TILE WARP_SIZE     // keys per shared-memory tile: one lane per key
#define PRE_MAX_HD 256
#define PRE_MAX_ROWS 16        // query rows (tokens * group) per block
#define PRE_ACC (PRE_MAX_ROWS * 128 / PRE_THREADS)

struct QueryTile {
    int seq;        // index into block_tables
    int first_row;  // row of the tile's first token in qkv / out
    int first_pos;  // absolute position of that token in its sequence
    int count;      // tokens in this tile
};

// grid: (num_tiles, num_kv_heads), block: PRE_THREADS. rows * head_dim <= PRE_MAX_ROWS * 128.
extern "C" __global__ void __launch_bounds__(PRE_THREADS) attention_prefill(
    bf16* __restrict__ out,                 // [tokens, num_heads * head_dim]
    const float* __restrict__ qkv,          // [tokens, row_stride]
    const bf16* __restrict__ k_cache,       // [blocks, kv_heads, block_size, head_dim]
    const bf16* __restrict__ v_cache,
    const int* __restrict__ block_tables,   // [seqs, max_blocks_per_seq]
    const QueryTile* __restrict__ tiles,    // [num_tiles]
    int row_stride, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks_per_seq, float scale)
{
    __shared__ float q_s[PRE_MAX_ROWS * 128];
    __shared__ __align__(16) bf16 k_s[PRE_TILE * (PRE_MAX_HD + 2)];
    __shared__ __align__(16) bf16 v_s[PRE_TILE * PRE_MAX_HD];
    __shared__ float s_s[PRE_MAX_ROWS * PRE_TILE];
    __shared__ float m_s[PRE_MAX_ROWS], l_s[PRE_MAX_ROWS], alpha_s[PRE_MAX_ROWS];

    const QueryTile tile = tiles[blockIdx.x];
    const int h = blockIdx.y;
    const int group = num_heads / num_kv_heads;
    const int rows = tile.count * group;  // row r = (token r / group, head h*group + r % group)
    const int* table = block_tables + (size_t)tile.seq * max_blocks_per_seq;
    const int end = tile.first_pos + tile.count;  // keys [0, end) are needed by the last row

    for (int i = threadIdx.x; i < rows * head_dim; i += blockDim.x) {
        const int r = i / head_dim, d = i % head_dim;
        const int token = tile.first_row + r / group, head = h * group + r % group;
        q_s[i] = qkv[(size_t)token * row_stride + head * head_dim + d] * scale;
    }
    if (threadIdx.x < rows) { m_s[threadIdx.x] = -INFINITY; l_s[threadIdx.x] = 0.0f; }
    float acc[PRE_ACC];
#pragma unroll
    for (int a = 0; a < PRE_ACC; ++a) acc[a] = 0.0f;
    __syncthreads();

    for (int t0 = 0; t0 < end; t0 += PRE_TILE) {
        load_kv_tile(k_s, v_s, k_cache, v_cache, table, t0, PRE_TILE, end, h, num_kv_heads,
                     block_size, head_dim, head_dim + 2, head_dim);
        __syncthreads();
        for (int idx = threadIdx.x; idx < rows * PRE_TILE; idx += blockDim.x) {
            const int r = idx / PRE_TILE, j = idx % PRE_TILE;
            const int query_pos = tile.first_pos + r / group;
            // Causal mask (also excludes positions >= end).
            s_s[idx] = (t0 + j <= query_pos)
                ? dot_q_k(q_s + r * head_dim, k_s + j * (head_dim + 2), head_dim) : -INFINITY;
        }
        __syncthreads();
        tile_softmax<PRE_THREADS>(s_s, m_s, l_s, alpha_s, rows);
        __syncthreads();
        tile_accumulate<PRE_ACC, PRE_THREADS>(acc, s_s, v_s, alpha_s, rows, head_dim);
        __syncthreads();
    }

#pragma unroll
    for (int a = 0; a < PRE_ACC; ++a) {
        const int idx = threadIdx.x + a * PRE_THREADS;
        if (idx < rows * head_dim) {
            const int r = idx / head_dim, d = idx % head_dim;
            const int token = tile.first_row + r / group, head = h * group + r % group;
            const float l = l_s[r];
            out[((size_t)token * num_heads + head) * head_dim + d] =
                f2bf(l > 0.0f ? acc[a] / l : 0.0f);
        }
    }
}
