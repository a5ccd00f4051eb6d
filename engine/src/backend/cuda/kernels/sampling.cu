// sampling.cu: next-token choice on the device: greedy argmax, and a temperature / top-k /
// top-p sampler driven by one host-drawn uniform number per row (so a seed reproduces); a
// grammar's token mask sets the logits it disallows to -inf first, and both samplers leave
// -inf logits out (they are never kept, counted or drawn).

#define SAMPLE_THREADS 1024

// Block-wide argmax; ties go to the lowest index, like the CPU sampler.
__device__ void block_argmax(const float* row, int vocab, float* best_v, int* best_i) {
    __shared__ float vs[32];
    __shared__ int is[32];
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (row[i] > v) { v = row[i]; idx = i; }
    }
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
    }
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    __syncthreads();
    if (lane == 0) { vs[warp] = v; is[warp] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / WARP_SIZE); ++w) {
            if (vs[w] > v || (vs[w] == v && is[w] < idx)) { v = vs[w]; idx = is[w]; }
        }
        vs[0] = v;
        is[0] = idx;
    }
    __syncthreads();
    *best_v = vs[0];
    *best_i = is[0];
}

// grid: (rows), block: any multiple of 32.
extern "C" __global__ void argmax_rows(const float* __restrict__ logits,  // [rows, vocab]
                                       int* __restrict__ out, int vocab)   // [rows]
{
    float v;
    int i;
    block_argmax(logits + (size_t)blockIdx.x * vocab, vocab, &v, &i);
    if (threadIdx.x == 0) out[blockIdx.x] = i;
}

// grid: (rows, ceil(vocab / 256)), block: 256. Bit (id % 32) of word (id / 32) of a row's
// mask allows token id; every other logit of the row becomes -inf.
extern "C" __global__ void apply_token_mask(float* __restrict__ logits,             // [rows, vocab]
                                            const unsigned int* __restrict__ mask,  // [rows, words]
                                            int vocab, int words)
{
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= vocab) return;
    const unsigned int w = i / 32 < words ? mask[(size_t)blockIdx.x * words + i / 32] : 0u;
    if (((w >> (i % 32)) & 1u) == 0u) logits[(size_t)blockIdx.x * vocab + i] = -INFINITY;
}

// Σ e^((x−max)/T) over tokens with logit ≥ threshold, and their count (masked tokens, at -inf,
// never count).
__device__ float kept_mass(const float* row, int vocab, float threshold, float max_logit,
                           float inv_t, float* count, float* scratch) {
    float mass = 0.0f, n = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (row[i] >= threshold && row[i] > -INFINITY) {
            mass += __expf((row[i] - max_logit) * inv_t);
            n += 1.0f;
        }
    }
    *count = block_sum(n, scratch);
    return block_sum(mass, scratch);
}

// grid: (rows), block: SAMPLE_THREADS. Keeps the top-k logits (k = 0: all), then the smallest
// set of those whose probability mass reaches top_p, found by bisection on a logit threshold
// (tokens tied at the threshold are all kept); then draws with `uniforms[row]` in [0, 1).
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_top_k_top_p(
    const float* __restrict__ logits,       // [rows, vocab]
    const float* __restrict__ temperature,  // [rows]; <= 0 means greedy
    const int* __restrict__ top_k,          // [rows]
    const float* __restrict__ top_p,        // [rows]
    const float* __restrict__ uniforms,     // [rows]
    int* __restrict__ out, int vocab)       // [rows]
{
    __shared__ float scratch[32];
    __shared__ float seg_s[SAMPLE_THREADS];
    const float* row = logits + (size_t)blockIdx.x * vocab;
    float max_logit;
    int best;
    block_argmax(row, vocab, &max_logit, &best);
    const float t = temperature[blockIdx.x];
    if (t <= 0.0f) { if (threadIdx.x == 0) out[blockIdx.x] = best; return; }
    const float inv_t = 1.0f / t;
    float min_local = INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (row[i] > -INFINITY) min_local = fminf(min_local, row[i]);
    }
    const float min_logit = -block_max(-min_local, scratch);

    float count;
    float threshold = min_logit;
    const int k = top_k[blockIdx.x];
    if (k > 0 && k < vocab) {  // largest threshold keeping >= k tokens
        float lo = min_logit, hi = max_logit;
        for (int it = 0; it < 40; ++it) {
            const float mid = 0.5f * (lo + hi);
            kept_mass(row, vocab, mid, max_logit, inv_t, &count, scratch);
            if (count >= (float)k) lo = mid; else hi = mid;
        }
        threshold = lo;
    }
    const float p = top_p[blockIdx.x];
    float mass = kept_mass(row, vocab, threshold, max_logit, inv_t, &count, scratch);
    if (p > 0.0f && p < 1.0f) {  // largest threshold keeping >= p of the mass
        const float want = p * mass;
        float lo = threshold, hi = max_logit;
        for (int it = 0; it < 40; ++it) {
            const float mid = 0.5f * (lo + hi);
            if (kept_mass(row, vocab, mid, max_logit, inv_t, &count, scratch) >= want) lo = mid;
            else hi = mid;
        }
        threshold = lo;
        mass = kept_mass(row, vocab, threshold, max_logit, inv_t, &count, scratch);
    }

    // Inverse CDF in index order: each thread sums one contiguous segment, thread 0 scans the
    // segment sums, and the thread whose segment holds the target walks it.
    const float target = uniforms[blockIdx.x] * mass;
    const int seg = (vocab + blockDim.x - 1) / blockDim.x;
    const int lo_i = threadIdx.x * seg, hi_i = min(vocab, lo_i + seg);
    float local = 0.0f;
    for (int i = lo_i; i < hi_i; ++i) {
        if (row[i] >= threshold && row[i] > -INFINITY) local += __expf((row[i] - max_logit) * inv_t);
    }
    seg_s[threadIdx.x] = local;
    __syncthreads();
    if (threadIdx.x == 0) {
        float run = 0.0f;
        for (int i = 0; i < (int)blockDim.x; ++i) { const float v = seg_s[i]; seg_s[i] = run; run += v; }
        out[blockIdx.x] = best;  // fallback if rounding leaves the target past the end
    }
    __syncthreads();
    float run = seg_s[threadIdx.x];
    if (run <= target && target < run + local) {
        for (int i = lo_i; i < hi_i; ++i) {
            if (row[i] < threshold || row[i] == -INFINITY) continue;
            run += __expf((row[i] - max_logit) * inv_t);
            if (run > target) { out[blockIdx.x] = i; break; }
        }
    }
}
