// rope.cu: puts the heads of the fused qkv rows in position, in place, one block per (token,
// head): the q/k/v bias is added (Qwen2), q and k heads are RMS-normalised (Qwen3), then q and
// k are rotated by their position. Two pairings: adjacent (2i, 2i+1) as in GGUF `llama`, and
// half-split (i, i + d/2) as in Hugging Face checkpoints. The angle of pair i at position p is
// p * inv_freq[i]; the table carries the checkpoint's RoPE scaling (llama3, linear, yarn), and
// cos and sin are multiplied by `rope_scale` (YaRN's attention factor, else 1).

__device__ __forceinline__ void rope_rotate(float* x, int a, int b, float c, float s) {
    const float xa = x[a], xb = x[b];
    x[a] = xa * c - xb * s;
    x[b] = xa * s + xb * c;
}

// grid: (tokens, num_heads + 2 * num_kv_heads), block: any (<= 1024, a multiple of 32).
// qkv row = [q heads | k heads | v heads] * head_dim.
template <bool ADJACENT>
__device__ void qkv_position(
    float* __restrict__ qkv,            // [tokens, (heads + 2 kv_heads) * head_dim], in place
    const int* __restrict__ positions,  // [tokens]
    const float* __restrict__ bias,     // [(heads + 2 kv_heads) * head_dim] or null
    const float* __restrict__ q_norm,   // [head_dim] or null (then k_norm is null too)
    const float* __restrict__ k_norm,   // [head_dim] or null
    const double* __restrict__ inv_freq,  // [head_dim / 2]
    int num_heads, int num_kv_heads, int head_dim, float eps, float rope_scale)
{
    __shared__ float scratch[32];
    const int t = blockIdx.x, head = blockIdx.y;
    const int row_width = (num_heads + 2 * num_kv_heads) * head_dim;
    float* h = qkv + (size_t)t * row_width + (size_t)head * head_dim;
    if (bias != nullptr) {
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) h[i] += bias[head * head_dim + i];
    }
    const bool is_q = head < num_heads;
    if (head >= num_heads + num_kv_heads) return;  // a value head: bias only (uniform per block)
    const float* w = is_q ? q_norm : k_norm;
    if (w != nullptr) {
        __syncthreads();  // the bias is in before the norm reads the head
        float sum_sq = 0.0f;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) sum_sq += h[i] * h[i];
        const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / (float)head_dim + eps);
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) h[i] = h[i] * inv_rms * w[i];
    }
    __syncthreads();  // every element is final before pairs are rotated
    const double pos = (double)positions[t];
    const int half = head_dim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        // The angle in fp64, like the CPU reference: in fp32, pos * inv_freq loses ~1e-3 rad at
        // positions in the thousands. This is a negligible share of a step either way.
        double sd, cd;
        sincos(pos * inv_freq[i], &sd, &cd);
        const float s = (float)sd * rope_scale, c = (float)cd * rope_scale;
        if (ADJACENT) rope_rotate(h, 2 * i, 2 * i + 1, c, s);
        else rope_rotate(h, i, i + half, c, s);
    }
}

extern "C" __global__ void qkv_position_adjacent(
    float* qkv, const int* positions, const float* bias, const float* q_norm,
    const float* k_norm, const double* inv_freq, int num_heads, int num_kv_heads, int head_dim,
    float eps, float rope_scale)
{
    qkv_position<true>(qkv, positions, bias, q_norm, k_norm, inv_freq, num_heads, num_kv_heads,
                       head_dim, eps, rope_scale);
}

extern "C" __global__ void qkv_position_half_split(
    float* qkv, const int* positions, const float* bias, const float* q_norm,
    const float* k_norm, const double* inv_freq, int num_heads, int num_kv_heads, int head_dim,
    float eps, float rope_scale)
{
    qkv_position<false>(qkv, positions, bias, q_norm, k_norm, inv_freq, num_heads, num_kv_heads,
                        head_dim, eps, rope_scale);
}
