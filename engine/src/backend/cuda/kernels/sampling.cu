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

// ---- The serving sampler: the specification of sampling/spec.rs, step for step as
// backend/cuda/sample_model.rs transcribes it (the CPU test of its semantics). Every float
// operation that must match the host is an explicitly rounded intrinsic (never contracted into
// a fused multiply-add), so the weights are the host's bit for bit.

#define SPEC_THREADS 1024

struct RowSampling {  // sampling::spec::RowSampling
    float inv_t;       // 0: greedy
    float min_weight;  // max(min_p, FLT_MIN)
    unsigned int top_k;
    float top_p;
    double uniform;    // [0, 1), the host generator's
};

struct Edit {  // sampling::spec::Edit: rep(l + bias) - subtract
    unsigned int id;
    float bias;
    float repetition;
    float subtract;
};

// grid: (rows), block: 256. Row r's edits are edits[offsets[r] .. offsets[r + 1]], one per id.
extern "C" __global__ void apply_logit_edits(float* __restrict__ logits,      // [rows, vocab]
                                             const Edit* __restrict__ edits,
                                             const int* __restrict__ offsets,  // [rows + 1]
                                             int vocab)
{
    float* row = logits + (size_t)blockIdx.x * vocab;
    for (int e = offsets[blockIdx.x] + threadIdx.x; e < offsets[blockIdx.x + 1]; e += blockDim.x) {
        const Edit d = edits[e];
        if (d.id >= (unsigned int)vocab) continue;
        float x = __fadd_rn(row[d.id], d.bias);
        if (d.repetition != 1.0f) x = x > 0.0f ? __fdiv_rn(x, d.repetition) : __fmul_rn(x, d.repetition);
        row[d.id] = __fsub_rn(x, d.subtract);
    }
}

// sampling/exp.rs operation for operation (the literals are its POLY, LOG2_E, ROUND_MAGIC).
__device__ __forceinline__ float spec_exp(float x) {
    if (isnan(x)) return x;
    const float t = __fmul_rn(fminf(fmaxf(x, -87.0f), 88.0f), 1.442695e0f);
    const float k = __fadd_rn(t, 1.2582912e7f);
    const float n = __fsub_rn(k, 1.2582912e7f);
    const float f = __fsub_rn(t, n);
    float p = 1.5353362e-4f;
    p = __fadd_rn(__fmul_rn(p, f), 1.3398874e-3f);
    p = __fadd_rn(__fmul_rn(p, f), 9.618438e-3f);
    p = __fadd_rn(__fmul_rn(p, f), 5.5503324e-2f);
    p = __fadd_rn(__fmul_rn(p, f), 2.4022648e-1f);
    p = __fadd_rn(__fmul_rn(p, f), 6.931472e-1f);
    const float two_f = __fadd_rn(__fmul_rn(p, f), 1.0f);
    const int n_bits = __float_as_int(k) - __float_as_int(1.2582912e7f);
    const float scale = __int_as_float((int)((unsigned int)(n_bits + 127) << 23));
    return x < -87.0f ? 0.0f : __fmul_rn(two_f, scale);
}

// Block-wide sums every thread receives, in one fixed order (warp shuffles, then the warps in
// order), so every thread takes the same branch on them. Counts go through it too (exact in a
// double).
__device__ double block_sum_d(double v, double* scratch) {
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (threadIdx.x % WARP_SIZE == 0) scratch[threadIdx.x / WARP_SIZE] = v;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < (int)(blockDim.x / WARP_SIZE); ++w) t += scratch[w];
    return t;
}

// The ranked prefix kept so far (sampling::spec::Cut): w > cw, or w == cw and id <= ci.
struct Cut { float w; int id; };
__device__ __forceinline__ bool keeps(Cut c, float w, int id) { return w > c.w || (w == c.w && id <= c.id); }

// Kept tokens whose weight is >= x (> x when strict): their count, or their mass.
__device__ int kept_count(const float* w, int vocab, Cut c, float x, bool strict, double* sd) {
    int n = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        n += keeps(c, w[i], i) && (strict ? w[i] > x : w[i] >= x);
    return (int)block_sum_d((double)n, sd);
}
__device__ double kept_mass(const float* w, int vocab, Cut c, float x, bool strict, double* sd) {
    double m = 0.0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (keeps(c, w[i], i) && (strict ? w[i] > x : w[i] >= x)) m += (double)w[i];
    return block_sum_d(m, sd);
}

// The lowest id c such that `need` kept tokens of weight x have ids <= c.
__device__ int tie_cut(const float* w, int vocab, Cut c, float x, int need, double* sd) {
    int lo = -1, hi = vocab - 1;
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        int n = 0;
        for (int i = threadIdx.x; i <= mid; i += blockDim.x) n += keeps(c, w[i], i) && w[i] == x;
        if ((int)block_sum_d((double)n, sd) >= need) hi = mid; else lo = mid;
    }
    return hi;
}

// The largest weight x (as bits, in [lo, hi)) whose kept tokens at or above it number >= k
// (by_mass: weigh >= goal). Weights are non-negative, so their bits order as they do.
__device__ float rank_cut(const float* w, int vocab, Cut c, unsigned int lo, unsigned int hi,
                          int k, double goal, bool by_mass, double* sd) {
    while (hi - lo > 1) {
        const unsigned int mid = lo + (hi - lo) / 2;
        const float x = __int_as_float((int)mid);
        const bool enough = by_mass ? kept_mass(w, vocab, c, x, false, sd) >= goal
                                    : kept_count(w, vocab, c, x, false, sd) >= k;
        if (enough) lo = mid; else hi = mid;
    }
    return __int_as_float((int)lo);
}

// Inverse CDF over the kept tokens in id order: each thread sums one contiguous segment, thread
// 0 scans the segment sums, and the thread whose segment holds the target walks it. The highest
// kept id if rounding runs past the end; -1 if nothing is kept.
__device__ int draw_in_id_order(const float* w, int vocab, Cut c, double target, double* seg_s,
                                int* si) {
    __shared__ int chosen;
    const int seg = (vocab + blockDim.x - 1) / blockDim.x;
    const int lo_i = threadIdx.x * seg, hi_i = min(vocab, lo_i + seg);
    double local = 0.0;
    int last = -1;
    for (int i = lo_i; i < hi_i; ++i)
        if (keeps(c, w[i], i)) { local += (double)w[i]; last = i; }
    seg_s[threadIdx.x] = local;
    if (threadIdx.x == 0) chosen = 0x7fffffff;
    __syncthreads();
    if (threadIdx.x == 0) {
        double run = 0.0;
        for (int i = 0; i < (int)blockDim.x; ++i) { const double v = seg_s[i]; seg_s[i] = run; run += v; }
    }
    __syncthreads();
    double run = seg_s[threadIdx.x];
    if (local > 0.0 && run <= target && target < run + local) {
        for (int i = lo_i; i < hi_i; ++i) {
            if (!keeps(c, w[i], i)) continue;
            run += (double)w[i];
            if (run > target) { atomicMin(&chosen, i); break; }
        }
    }
    // The highest kept id, for the fallback.
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    __syncthreads();
    if (threadIdx.x % WARP_SIZE == 0) si[threadIdx.x / WARP_SIZE] = last;
    __syncthreads();
    int highest = -1;
    for (int i = 0; i < (int)(blockDim.x / WARP_SIZE); ++i) highest = max(highest, si[i]);
    return chosen != 0x7fffffff ? chosen : highest;
}

// grid: (rows), block: SPEC_THREADS. One token per row by the specification; the row's logits
// become its weights (the buffer is dead after sampling). out[r] = -1: no finite logit.
extern "C" __global__ void __launch_bounds__(SPEC_THREADS) sample_rows(
    float* __restrict__ logits,                 // [rows, vocab], edited and masked
    const RowSampling* __restrict__ settings,   // [rows]
    int* __restrict__ out, int vocab)           // [rows]
{
    __shared__ int si[32];
    __shared__ double sd[32];
    __shared__ double seg_s[SPEC_THREADS];
    float* w = logits + (size_t)blockIdx.x * vocab;
    const RowSampling s = settings[blockIdx.x];
    float max_logit;
    int best;
    block_argmax(w, vocab, &max_logit, &best);
    if (s.inv_t == 0.0f) {
        if (threadIdx.x == 0) out[blockIdx.x] = max_logit > -INFINITY ? best : -1;
        return;
    }
    if (isinf(max_logit) || isnan(max_logit)) {
        if (threadIdx.x == 0) out[blockIdx.x] = -1;
        return;
    }
    __syncthreads();  // every thread has read its maximum before the row is overwritten
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float x = spec_exp(__fmul_rn(__fsub_rn(w[i], max_logit), s.inv_t));
        w[i] = x >= s.min_weight ? x : 0.0f;
    }
    __syncthreads();
    Cut cut = {0.0f, -1};
    const int k = (int)min(s.top_k, 0x7fffffffu);
    if (k > 0 && k < kept_count(w, vocab, cut, 0.0f, true, sd)) {
        const float wk = rank_cut(w, vocab, cut, 1u, 0x7f800000u, k, 0.0, false, sd);
        const int need = k - kept_count(w, vocab, cut, wk, true, sd);
        cut.id = tie_cut(w, vocab, cut, wk, need, sd);
        cut.w = wk;
    }
    double mass = kept_mass(w, vocab, cut, 0.0f, false, sd);
    if (s.top_p < 1.0f) {
        const double goal = (double)s.top_p * mass;
        const float wp = rank_cut(w, vocab, cut, 0u, 0x7f800000u, 0, goal, true, sd);
        double run = kept_mass(w, vocab, cut, wp, true, sd);
        const int ties = kept_count(w, vocab, cut, wp, false, sd) - kept_count(w, vocab, cut, wp, true, sd);
        int j = 0;
        while (j < ties) { run += (double)wp; ++j; if (run >= goal) break; }
        const int id = tie_cut(w, vocab, cut, wp, j, sd);
        cut.w = wp;
        cut.id = id;
        mass = kept_mass(w, vocab, cut, 0.0f, false, sd);
    }
    const int chosen = draw_in_id_order(w, vocab, cut, s.uniform * mass, seg_s, si);
    if (threadIdx.x == 0) out[blockIdx.x] = chosen;
}

// ---- Logprobs of sampled rows, under the raw logits (before masks, edits and temperature), as
// sampling/logprobs.rs reports them: the chosen token's and the n most likely (value
// descending, lower id first on a tie, NaN never). Mirrored by sample_model.rs.

#define MAX_TOP_LOGPROBS 20

// grid: (rows), block: SPEC_THREADS. Row k reads raw row k and the token chosen for logits row
// rows_of[k]; writes out_lp[k, 0] (the chosen token's), out_lp[k, 1 + j] and out_ids[k, j] for
// the j-th most likely, j < n_top[k] (ids -1 past the tokens there are).
extern "C" __global__ void __launch_bounds__(SPEC_THREADS) row_logprobs(
    const float* __restrict__ raw,      // [rows, vocab]
    const int* __restrict__ rows_of,    // [rows]
    const int* __restrict__ chosen,     // [logits rows]
    const int* __restrict__ n_top,      // [rows]
    float* __restrict__ out_lp,         // [rows, 1 + MAX_TOP_LOGPROBS]
    int* __restrict__ out_ids, int vocab)  // [rows, MAX_TOP_LOGPROBS]
{
    __shared__ double sd[32];
    __shared__ float vs[32];
    __shared__ int is[32];
    const float* row = raw + (size_t)blockIdx.x * vocab;
    float m;
    int best;
    block_argmax(row, vocab, &m, &best);
    double sum = 0.0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (!isnan(row[i])) sum += (double)expf(row[i] - m);
    sum = block_sum_d(sum, sd);
    const float lse = isinf(m) || isnan(m) ? m : m + (float)log(sum);
    float* lp = out_lp + (size_t)blockIdx.x * (1 + MAX_TOP_LOGPROBS);
    int* ids = out_ids + (size_t)blockIdx.x * MAX_TOP_LOGPROBS;
    const int token = chosen[rows_of[blockIdx.x]];
    if (threadIdx.x == 0) lp[0] = token >= 0 && token < vocab ? row[token] - lse : -INFINITY;
    // The j-th most likely: the best of the entries ranked after the (j-1)-th.
    float pv = INFINITY;
    int pi = -1;
    const int n = min(n_top[blockIdx.x], MAX_TOP_LOGPROBS);
    for (int j = 0; j < n; ++j) {
        float v = -INFINITY;
        int idx = 0x7fffffff;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float l = row[i];
            const bool after = l < pv || (l == pv && i > pi);
            if (!isnan(l) && after && (idx == 0x7fffffff || l > v || (l == v && i < idx))) { v = l; idx = i; }
        }
        for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            if (oi != 0x7fffffff && (idx == 0x7fffffff || ov > v || (ov == v && oi < idx))) { v = ov; idx = oi; }
        }
        __syncthreads();
        if (threadIdx.x % WARP_SIZE == 0) { vs[threadIdx.x / WARP_SIZE] = v; is[threadIdx.x / WARP_SIZE] = idx; }
        __syncthreads();
        v = -INFINITY;
        idx = 0x7fffffff;
        for (int w = 0; w < (int)(blockDim.x / WARP_SIZE); ++w) {
            if (is[w] != 0x7fffffff && (idx == 0x7fffffff || vs[w] > v || (vs[w] == v && is[w] < idx))) { v = vs[w]; idx = is[w]; }
        }
        if (threadIdx.x == 0) {
            ids[j] = idx == 0x7fffffff ? -1 : idx;
            lp[1 + j] = v - lse;
        }
        pv = v;
        pi = idx;
        if (idx == 0x7fffffff) break;
    }
}
