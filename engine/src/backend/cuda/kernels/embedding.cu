// embedding.cu: token ids -> rows of the embedding table, widened to the fp32 residual stream.

// grid: (tokens), block: any. Ids >= vocab were rejected on the host; clamp for safety.
extern "C" __global__ void embedding_gather(
    float* __restrict__ out,          // [tokens, hidden]
    const bf16* __restrict__ table,   // [vocab, hidden]
    const u32* __restrict__ ids,      // [tokens]
    int hidden, int vocab)
{
    const int t = blockIdx.x;
    u32 id = ids[t];
    if (id >= (u32)vocab) id = 0;
    const bf16* row = table + (size_t)id * hidden;
    float* dst = out + (size_t)t * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = bf2f(row[i]);
}

// grid: (rows), block: any. Picks the rows whose logits are wanted before the output head.
extern "C" __global__ void gather_rows(
    bf16* __restrict__ out,        // [rows, hidden]
    const bf16* __restrict__ in,   // [tokens, hidden]
    const int* __restrict__ rows,  // [rows]
    int hidden)
{
    const bf16* src = in + (size_t)rows[blockIdx.x] * hidden;
    bf16* dst = out + (size_t)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
}
