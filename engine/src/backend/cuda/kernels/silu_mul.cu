// silu_mul.cu: the SwiGLU gate, silu(gate) * up, from the fused gate|up GEMM output.

// grid: ceil(tokens * ffn / 256), block: 256.
extern "C" __global__ void silu_mul(
    const float* __restrict__ gate_up,  // [tokens, 2 * ffn]: gate then up
    bf16* __restrict__ out,             // [tokens, ffn]
    int tokens, int ffn)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)tokens * ffn) return;
    const size_t t = i / ffn, j = i % ffn;
    const float g = gate_up[t * 2 * ffn + j];
    const float u = gate_up[t * 2 * ffn + ffn + j];
    out[i] = f2bf(g / (1.0f + __expf(-g)) * u);
}
