//! `embedding.cu`: token rows of the embedding table, and the rows picked for the output head.

use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use super::{grid, int, need};
use crate::backend::cuda::{Gpu, Result};

/// `out[t] = table[ids[t]]` widened to f32, for `tokens` ids (ids ≥ `vocab` read row 0).
pub fn embedding_gather(
    gpu: &Gpu,
    out: &mut CudaSlice<f32>, // [tokens, hidden]
    table: &CudaSlice<bf16>,  // [vocab, hidden]
    ids: &CudaSlice<u32>,     // [tokens]
    tokens: usize,
    hidden: usize,
    vocab: usize,
) -> Result<()> {
    need(
        "embedding_gather",
        &[
            ("out", out.len(), tokens * hidden),
            ("table", table.len(), vocab * hidden),
            ("ids", ids.len(), tokens),
        ],
    )?;
    if tokens == 0 {
        return Ok(());
    }
    let (h, v) = (int(hidden, "hidden")?, int(vocab, "vocab")?);
    let f = gpu.function("embedding_gather")?;
    // SAFETY: (f32*, const bf16*, const u32*, int, int) as in embedding.cu. Block t reads
    // ids[t] (t < tokens ≤ ids.len()), one row of `table` (the id is clamped below vocab) and
    // writes row t of `out`: all inside the sizes checked above.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(out)
            .arg(table)
            .arg(ids)
            .arg(&h)
            .arg(&v)
            .launch(grid(tokens, 1, 1, 256)?)
    }?;
    Ok(())
}

/// `out[r] = input[rows[r]]` for `count` rows of `hidden` values; `rows` are token indices
/// below `tokens` (the step plan's logit rows, validated on the host).
pub fn gather_rows(
    gpu: &Gpu,
    out: &mut CudaSlice<bf16>, // [count, hidden]
    input: &CudaSlice<bf16>,   // [tokens, hidden]
    rows: &CudaSlice<i32>,     // [count]
    count: usize,
    tokens: usize,
    hidden: usize,
) -> Result<()> {
    need(
        "gather_rows",
        &[
            ("out", out.len(), count * hidden),
            ("in", input.len(), tokens * hidden),
            ("rows", rows.len(), count),
        ],
    )?;
    if count == 0 {
        return Ok(());
    }
    let h = int(hidden, "hidden")?;
    let f = gpu.function("gather_rows")?;
    // SAFETY: (bf16*, const bf16*, const int*, int) as in embedding.cu. Block r reads rows[r]
    // (r < count), a row index below `tokens` by the plan's construction, and copies one row.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(out)
            .arg(input)
            .arg(rows)
            .arg(&h)
            .launch(grid(count, 1, 1, 256)?)
    }?;
    Ok(())
}
