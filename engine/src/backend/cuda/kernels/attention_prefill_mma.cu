// attention_prefill_mma.cu: causal prefill attention over the paged cache on bf16 tensor cores
// (FlashAttention-2 style). Same inputs, tiles and output as attention_prefill.cu, which stays
// the reference; geometry.rs `PrefillKernel::Mma` mirrors the constants.
//
// One block of 4 warps per (query tile, kv head) owns MMA_ROWS = 64 query rows: row
// r = (token r / group, head h * group + r % group), so the GQA group's heads share every K/V
// tile the block loads into shared memory. Warp w owns rows 16w..16w+15 and computes, per tile
// of MMA_KEYS keys, S = Q K^T and O += P V with mma.sync m16n8k16 (bf16 in, fp32 accumulate),
// keeping an online softmax in fp32 per row (running max in log2 units, running sum). Q is
// pre-scaled by softmax_scale * log2(e) and rounded to bf16 once; P is rounded to bf16 for the
// PV product (the row sum stays fp32), as FlashAttention does.

#define MMA_THREADS 128
#define MMA_WARPS (MMA_THREADS / WARP_SIZE)
#define MMA_ROWS 64                    // query rows per block: 16 per warp
#define MMA_KEYS 64                    // keys per shared-memory tile
#define MMA_PAD 8                      // bf16 padding per shared row: 16 bytes, no bank conflicts
#define MMA_MAX_HD 128
// Shared memory of a block: K and V tiles of the largest head dimension. Q (MMA_ROWS rows) is
// staged through the same buffer: it lives in registers once the first tile loads.
#define MMA_SMEM_ELEMS (2 * MMA_KEYS * (MMA_MAX_HD + MMA_PAD))
#define LOG2E 1.4426950408889634f

struct QueryTile {
    int seq;        // index into block_tables
    int first_row;  // row of the tile's first token in qkv / out
    int first_pos;  // absolute position of that token in its sequence
    int count;      // tokens in this tile
};

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low 16 bits)
    return *reinterpret_cast<const u32*>(&v);
}

__device__ __forceinline__ u32 pack_raw(bf16 lo, bf16 hi) {
    return (u32)__bfloat16_as_ushort(lo) | ((u32)__bfloat16_as_ushort(hi) << 16);
}

// d += a (16x16, row) * b (16x8, col): bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float* d, const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Rows of the block: scaled q in bf16 into q_s ([MMA_ROWS][HD + MMA_PAD]), zeros past `rows`.
template <int HD>
__device__ void load_q_tile(bf16* q_s, const float* qkv, const QueryTile& tile, int h,
                            int group, int rows, int row_stride, float q_scale) {
    for (int i = threadIdx.x; i < MMA_ROWS * HD / 2; i += MMA_THREADS) {
        const int r = i / (HD / 2), d = 2 * (i % (HD / 2));
        float2 q = make_float2(0.0f, 0.0f);
        if (r < rows) {
            const int token = tile.first_row + r / group, head = h * group + r % group;
            q = *reinterpret_cast<const float2*>(qkv + (size_t)token * row_stride + head * HD + d);
        }
        *reinterpret_cast<u32*>(q_s + r * (HD + MMA_PAD) + d) =
            pack_bf16(q.x * q_scale, q.y * q_scale);
    }
}

// S (16 x MMA_KEYS) of this warp = Q K^T: per key group of 8, accumulate over HD / 16 steps.
template <int HD>
__device__ __forceinline__ void warp_scores(float (*s)[4], const u32 (*qf)[4], const bf16* k_s,
                                            int g, int t) {
#pragma unroll
    for (int n = 0; n < MMA_KEYS / 8; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        const bf16* k_row = k_s + (8 * n + g) * (HD + MMA_PAD) + 2 * t;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const u32 b0 = *reinterpret_cast<const u32*>(k_row + 16 * kk);
            const u32 b1 = *reinterpret_cast<const u32*>(k_row + 16 * kk + 8);
            mma_bf16(s[n], qf[kk], b0, b1);
        }
    }
}

// Online softmax over one tile for this thread's two rows (g and g + 8 of the warp): masks
// keys past each row's position, turns s into p = 2^(s - m_new) in place, rescales o and the
// thread's partial row sums by 2^(m_old - m_new).
template <int HD>
__device__ __forceinline__ void warp_softmax(float (*s)[4], float (*o)[4], float* m, float* l,
                                             int t0, int t, const int* query_pos) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < MMA_KEYS / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = t0 + 8 * n + 2 * t + e;
                float& v = s[n][2 * half + e];
                if (key > query_pos[half]) v = -INFINITY;
                mx = fmaxf(mx, v);
            }
        }
        // The 4 lanes of a quad hold one row's keys.
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[half], mx);
        // A row with no key yet keeps m = -inf: subtract 0 so no (-inf) - (-inf) appears.
        const float m_use = (m_new == -INFINITY) ? 0.0f : m_new;
        const float alpha = exp2f(m[half] - m_use);
        m[half] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < MMA_KEYS / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& v = s[n][2 * half + e];
                v = exp2f(v - m_use);
                sum += v;
            }
        }
        l[half] = l[half] * alpha + sum;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n) {
            o[n][2 * half] *= alpha;
            o[n][2 * half + 1] *= alpha;
        }
    }
}

// O (16 x HD) += P (16 x MMA_KEYS, from the score fragments) V (MMA_KEYS x HD).
template <int HD>
__device__ __forceinline__ void warp_pv(float (*o)[4], const float (*p)[4], const bf16* v_s,
                                        int g, int t) {
#pragma unroll
    for (int kk = 0; kk < MMA_KEYS / 16; ++kk) {
        // The C layout of two adjacent 8-key score tiles is the A layout of one 16-key step.
        const u32 a[4] = {
            pack_bf16(p[2 * kk][0], p[2 * kk][1]),
            pack_bf16(p[2 * kk][2], p[2 * kk][3]),
            pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
            pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]),
        };
        const bf16* v0 = v_s + (16 * kk + 2 * t) * (HD + MMA_PAD) + g;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n) {
            const bf16* v = v0 + 8 * n;
            const u32 b0 = pack_raw(v[0], v[HD + MMA_PAD]);
            const u32 b1 = pack_raw(v[8 * (HD + MMA_PAD)], v[9 * (HD + MMA_PAD)]);
            mma_bf16(o[n], a, b0, b1);
        }
    }
}

template <int HD>
__device__ void prefill_mma(bf16* smem, bf16* __restrict__ out, const float* __restrict__ qkv,
                            const bf16* __restrict__ k_cache, const bf16* __restrict__ v_cache,
                            const int* __restrict__ block_tables,
                            const QueryTile* __restrict__ tiles, int row_stride, int num_heads,
                            int num_kv_heads, int block_size, int max_blocks_per_seq,
                            float scale) {
    constexpr int STRIDE = HD + MMA_PAD;
    static_assert(HD <= MMA_MAX_HD && MMA_ROWS <= 2 * MMA_KEYS, "tiles exceed MMA_SMEM_ELEMS");
    bf16* k_s = smem;
    bf16* v_s = smem + MMA_KEYS * STRIDE;

    const QueryTile tile = tiles[blockIdx.x];
    const int h = blockIdx.y;
    const int group = num_heads / num_kv_heads;
    const int rows = tile.count * group;
    const int* table = block_tables + (size_t)tile.seq * max_blocks_per_seq;
    const int end = tile.first_pos + tile.count;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int g = lane / 4, t = lane % 4;

    load_q_tile<HD>(smem, qkv, tile, h, group, rows, row_stride, scale * LOG2E);
    __syncthreads();
    u32 qf[HD / 16][4];
    const int r0 = 16 * warp + g;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const bf16* q = smem + r0 * STRIDE + 16 * kk + 2 * t;
        qf[kk][0] = *reinterpret_cast<const u32*>(q);
        qf[kk][1] = *reinterpret_cast<const u32*>(q + 8 * STRIDE);
        qf[kk][2] = *reinterpret_cast<const u32*>(q + 8);
        qf[kk][3] = *reinterpret_cast<const u32*>(q + 8 * STRIDE + 8);
    }
    // Padding rows (past `rows`) take the last real row's position: never fully masked.
    const int query_pos[2] = {tile.first_pos + min(r0, rows - 1) / group,
                              tile.first_pos + min(r0 + 8, rows - 1) / group};
    // The warp's last position: tiles starting past it hold no key any of its rows sees (a
    // warp with only padding rows skips every tile).
    const int warp_last =
        16 * warp < rows ? tile.first_pos + min(16 * warp + 15, rows - 1) / group : -1;

    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float s[MMA_KEYS / 8][4];

    for (int t0 = 0; t0 < end; t0 += MMA_KEYS) {
        __syncthreads();  // every warp is done with the previous tile (and with q)
        load_kv_tile(k_s, v_s, k_cache, v_cache, table, t0, MMA_KEYS, end, h, num_kv_heads,
                     block_size, HD, STRIDE, STRIDE);
        __syncthreads();
        if (t0 > warp_last) continue;
        warp_scores<HD>(s, qf, k_s, g, t);
        warp_softmax<HD>(s, o, m, l, t0, t, query_pos);
        warp_pv<HD>(o, s, v_s, g, t);
    }

#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float sum = l[half];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int r = r0 + 8 * half;
        if (r >= rows) continue;
        const int token = tile.first_row + r / group, head = h * group + r % group;
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        bf16* dst = out + ((size_t)token * num_heads + head) * HD + 2 * t;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n) {
            *reinterpret_cast<__nv_bfloat162*>(dst + 8 * n) =
                __floats2bfloat162_rn(o[n][2 * half] * inv, o[n][2 * half + 1] * inv);
        }
    }
}

// grid: (num_tiles, num_kv_heads), block: MMA_THREADS; each tile holds at most
// MMA_ROWS / group tokens. The naive kernel's signature; head_dim is 64 or 128 (the host runs
// the naive kernel for any other), each compiled as its own instance.
extern "C" __global__ void __launch_bounds__(MMA_THREADS) attention_prefill_mma(
    bf16* __restrict__ out, const float* __restrict__ qkv, const bf16* __restrict__ k_cache,
    const bf16* __restrict__ v_cache, const int* __restrict__ block_tables,
    const QueryTile* __restrict__ tiles, int row_stride, int num_heads, int num_kv_heads,
    int head_dim, int block_size, int max_blocks_per_seq, float scale)
{
    __shared__ __align__(16) bf16 smem[MMA_SMEM_ELEMS];
    if (head_dim == 64) {
        prefill_mma<64>(smem, out, qkv, k_cache, v_cache, block_tables, tiles, row_stride,
                        num_heads, num_kv_heads, block_size, max_blocks_per_seq, scale);
    } else if (head_dim == 128) {
        prefill_mma<128>(smem, out, qkv, k_cache, v_cache, block_tables, tiles, row_stride,
                         num_heads, num_kv_heads, block_size, max_blocks_per_seq, scale);
    }
}
