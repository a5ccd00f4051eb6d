// rope.cu: rotary position embedding on the q and k parts of the fused qkv rows, in place.
// Two layouts: adjacent pairs (2i, 2i+1) as in GGUF `llama`, and half-split (i, i + d/2) as in
// Hugging Face checkpoints. The angle of pair i at position p is p * base^(-2i/d).

__device__ __forceinline__ void rope_rotate(float* x, int a, int b, float c, float s) {
    const float xa = x[a], xb = x[b];
    x[a] = xa * c - xb * s;
    x[b] = xa * s + xb * c;
}

// grid: (tokens), block: any. qkv row = [q heads | k heads | v heads] * head_dim.
template <bool ADJACENT>
__device__ void rope_apply(float* qkv, const int* positions, int num_heads, int num_kv_heads,
                           int head_dim, float base)
{
    const int t = blockIdx.x;
    const int row_width = (num_heads + 2 * num_kv_heads) * head_dim;
    float* row = qkv + (size_t)t * row_width;
    const double pos = (double)positions[t];
    const int half = head_dim / 2;
    const int rotated_heads = num_heads + num_kv_heads;  // q and k, never v
    for (int job = threadIdx.x; job < rotated_heads * half; job += blockDim.x) {
        const int head = job / half, i = job % half;
        // The angle in fp64, like the CPU reference: in fp32, pos * freq loses ~1e-3 rad at
        // positions in the thousands. RoPE is a negligible share of a step either way.
        const double inv_freq = pow((double)base, -2.0 * (double)i / (double)head_dim);
        double sd, cd;
        sincos(pos * inv_freq, &sd, &cd);
        const float s = (float)sd, c = (float)cd;
        float* h = row + head * head_dim;
        if (ADJACENT) rope_rotate(h, 2 * i, 2 * i + 1, c, s);
        else rope_rotate(h, i, i + half, c, s);
    }
}

extern "C" __global__ void rope_adjacent(float* qkv, const int* positions, int num_heads,
                                         int num_kv_heads, int head_dim, float base)
{
    rope_apply<true>(qkv, positions, num_heads, num_kv_heads, head_dim, base);
}

extern "C" __global__ void rope_half_split(float* qkv, const int* positions, int num_heads,
                                           int num_kv_heads, int head_dim, float base)
{
    rope_apply<false>(qkv, positions, num_heads, num_kv_heads, head_dim, base);
}
