// rmsnorm.cu: RMSNorm fused with the residual add that precedes it.

// grid: (tokens), block: 256. residual += delta (when delta != null), then
// out = residual / rms(residual) * weight, rounded to bf16 for the next GEMM.
extern "C" __global__ void rmsnorm_residual(
    float* __restrict__ residual,      // [tokens, hidden], updated in place
    const float* __restrict__ delta,   // [tokens, hidden] or null
    const float* __restrict__ weight,  // [hidden]
    bf16* __restrict__ out,            // [tokens, hidden]
    int hidden, float eps)
{
    __shared__ float scratch[32];
    const size_t row = (size_t)blockIdx.x * hidden;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float x = residual[row + i];
        if (delta != nullptr) {
            x += delta[row + i];
            residual[row + i] = x;
        }
        sum_sq += x * x;
    }
    const float total = block_sum(sum_sq, scratch);
    const float inv_rms = rsqrtf(total / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        out[row + i] = f2bf(residual[row + i] * inv_rms * weight[i]);
    }
}
