// prelude.cuh: prepended to every kernel file before NVRTC compiles it (NVRTC has no
// project include path). bf16 storage, fp32 arithmetic; warp/block reductions.
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef unsigned int u32;

#define WARP_SIZE 32
#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ float bf2f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 f2bf(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block; every thread gets the result. `scratch` holds >= 32 floats.
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int warps = (blockDim.x + WARP_SIZE - 1) / WARP_SIZE;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = (threadIdx.x < warps) ? scratch[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    return scratch[0];
}

// Max over the whole block; every thread gets the result. `scratch` holds >= 32 floats.
__device__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int warps = (blockDim.x + WARP_SIZE - 1) / WARP_SIZE;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = (threadIdx.x < warps) ? scratch[threadIdx.x] : -INFINITY;
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    return scratch[0];
}

// Loads keys and values of positions [t0, t0 + tile) (zeros past `end`) of kv head `h` from
// the paged cache ([blocks, kv_heads, block_size, head_dim]) into shared memory rows of
// `k_stride` and `v_stride` bf16 (the attention kernels pad rows so that lanes reading
// different rows hit different banks; k_stride even, v_stride a multiple of 8). Global reads
// are 16 bytes (8 values); head_dim is a multiple of 8.
__device__ void load_kv_tile(bf16* k_s, bf16* v_s, const bf16* k_cache, const bf16* v_cache,
                             const int* table, int t0, int tile, int end, int h,
                             int num_kv_heads, int block_size, int head_dim, int k_stride,
                             int v_stride)
{
    const int vecs = head_dim / 8;
    for (int idx = threadIdx.x; idx < tile * vecs; idx += blockDim.x) {
        const int j = idx / vecs, c = idx % vecs, pos = t0 + j;
        uint4 k8 = make_uint4(0, 0, 0, 0), v8 = k8;
        if (pos < end) {
            const int block = table[pos / block_size];
            const size_t base =
                (((size_t)block * num_kv_heads + h) * block_size + pos % block_size) * head_dim;
            k8 = reinterpret_cast<const uint4*>(k_cache + base)[c];
            v8 = reinterpret_cast<const uint4*>(v_cache + base)[c];
        }
        unsigned int* kw = reinterpret_cast<unsigned int*>(k_s + j * k_stride) + 4 * c;
        kw[0] = k8.x; kw[1] = k8.y; kw[2] = k8.z; kw[3] = k8.w;
        reinterpret_cast<uint4*>(v_s + j * v_stride)[c] = v8;
    }
}

// --- Tile attention helpers (attention_decode.cu and attention_prefill.cu) -------------------
// Both kernels walk the keys in tiles of WARP_SIZE positions held in shared memory and keep an
// online softmax per query row: running max m, running sum l, and an unnormalised output.

// q · k for one query row (fp32, pre-scaled) and one cached key row (bf16, read in pairs).
__device__ __forceinline__ float dot_q_k(const float* q, const bf16* k_row, int head_dim) {
    const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(k_row);
    float dot = 0.0f;
    for (int p = 0; p < head_dim / 2; ++p) {
        const float2 kf = __bfloat1622float2(k2[p]);
        dot += q[2 * p] * kf.x + q[2 * p + 1] * kf.y;
    }
    return dot;
}

// One warp per row, one lane per key of the tile: turns the scores s_s[r * WARP_SIZE + lane]
// (-inf where masked) into e^(s - m_new) in place, updates m_s and l_s, and leaves in alpha_s
// the factor the row's earlier accumulators must be scaled by.
template <int THREADS>
__device__ void tile_softmax(float* s_s, float* m_s, float* l_s, float* alpha_s, int rows) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    for (int r = warp; r < rows; r += THREADS / WARP_SIZE) {
        const float s = s_s[r * WARP_SIZE + lane];
        const float m_old = m_s[r];
        const float m_new = fmaxf(m_old, warp_max(s));
        const float p = (s == -INFINITY) ? 0.0f : __expf(s - m_new);
        s_s[r * WARP_SIZE + lane] = p;
        const float sum = warp_sum(p);
        if (lane == 0) {
            const float alpha = (m_old == -INFINITY) ? 0.0f : __expf(m_old - m_new);
            alpha_s[r] = alpha;
            l_s[r] = l_s[r] * alpha + sum;
            m_s[r] = m_new;
        }
    }
}

// acc = acc * alpha + p · V for this thread's fixed (row, dim) elements: element
// idx = threadIdx.x + a * THREADS of the [rows, head_dim] output, for a < ACC.
template <int ACC, int THREADS>
__device__ void tile_accumulate(float* acc, const float* s_s, const bf16* v_s,
                                const float* alpha_s, int rows, int head_dim) {
#pragma unroll
    for (int a = 0; a < ACC; ++a) {
        const int idx = threadIdx.x + a * THREADS;
        if (idx < rows * head_dim) {
            const int r = idx / head_dim, d = idx % head_dim;
            float v_acc = acc[a] * alpha_s[r];
            for (int j = 0; j < WARP_SIZE; ++j) {
                v_acc += s_s[r * WARP_SIZE + j] * bf2f(v_s[j * head_dim + d]);
            }
            acc[a] = v_acc;
        }
    }
}
