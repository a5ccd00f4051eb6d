//! `sampling.cu`'s serving sampler: the specification's logit edits and per-row draw
//! (`sampling::spec`), on the logits the output head left on the device.

use cudarc::driver::{CudaSlice, DeviceRepr, PushKernelArg, ValidAsZeroBits};

use super::{grid, int, need};
use crate::backend::cuda::{Gpu, Result};
use crate::sampling::spec::{Edit, RowSampling};

/// Threads per row of `sample_rows` (the kernel's `SPEC_THREADS` launch bound).
const THREADS: u32 = 1024;
/// Threads per row of `apply_logit_edits`.
const EDIT_THREADS: u32 = 256;

// SAFETY: `Edit` is `repr(C)` of a `u32` and three `f32` (the kernel's `Edit`); any bits are
// valid and all-zero bits are an edit of token 0 that `offsets` never reaches unless uploaded.
unsafe impl DeviceRepr for Edit {}
// SAFETY: all-zero bits are a valid `Edit`.
unsafe impl ValidAsZeroBits for Edit {}
// SAFETY: `RowSampling` is `repr(C)` of `f32, f32, u32, f32, f64` (24 bytes, the kernel's
// `RowSampling`); any bits are valid.
unsafe impl DeviceRepr for RowSampling {}
// SAFETY: all-zero bits are a valid `RowSampling` (greedy).
unsafe impl ValidAsZeroBits for RowSampling {}

/// Row `r`'s edits, `edits[offsets[r] .. offsets[r + 1]]`, applied to its logits.
pub fn apply_logit_edits(
    gpu: &Gpu,
    logits: &mut CudaSlice<f32>, // [rows, vocab]
    edits: &CudaSlice<Edit>,     // [offsets[rows]]
    offsets: &CudaSlice<i32>,    // [rows + 1]
    total_edits: usize,
    rows: usize,
    vocab: usize,
) -> Result<()> {
    need(
        "apply_logit_edits",
        &[
            ("logits", logits.len(), rows * vocab),
            ("edits", edits.len(), total_edits),
            ("offsets", offsets.len(), rows + 1),
        ],
    )?;
    if rows == 0 || total_edits == 0 {
        return Ok(());
    }
    let v = int(vocab, "vocab")?;
    let f = gpu.function("apply_logit_edits")?;
    // SAFETY: (float*, const Edit*, const int*, int) as in sampling.cu; block r touches row r
    // at edit ids below vocab, and edits between its offsets, which the caller built within
    // `total_edits` (checked above).
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(logits)
            .arg(edits)
            .arg(offsets)
            .arg(&v)
            .launch(grid(rows, 1, 1, EDIT_THREADS)?)
    }?;
    Ok(())
}

/// One token per row by the specification (`out[r] = -1`: the row had no finite logit). The
/// rows' logits are overwritten with their weights.
pub fn sample_rows(
    gpu: &Gpu,
    logits: &mut CudaSlice<f32>,       // [rows, vocab]
    settings: &CudaSlice<RowSampling>, // [rows]
    out: &mut CudaSlice<i32>,          // [rows]
    rows: usize,
    vocab: usize,
) -> Result<()> {
    need(
        "sample_rows",
        &[
            ("logits", logits.len(), rows * vocab),
            ("settings", settings.len(), rows),
            ("out", out.len(), rows),
        ],
    )?;
    if rows == 0 {
        return Ok(());
    }
    let v = int(vocab, "vocab")?;
    let f = gpu.function("sample_rows")?;
    // SAFETY: (float*, const RowSampling*, int*, int) as in sampling.cu; block r reads and
    // writes row r, reads settings[r] and writes out[r].
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(logits)
            .arg(settings)
            .arg(out)
            .arg(&v)
            .launch(grid(rows, 1, 1, THREADS)?)
    }?;
    Ok(())
}

/// Alternatives per row of `row_logprobs` (the kernel's `MAX_TOP_LOGPROBS`, the API's limit).
pub const MAX_TOP_LOGPROBS: usize = crate::sampling::MAX_TOP_LOGPROBS as usize;

/// The buffers of `row_logprobs`: `rows` raw logits rows, the logits row each was sampled
/// from, how many alternatives each wants, and the outputs.
pub struct LogprobRows<'a> {
    pub raw: &'a CudaSlice<f32>,     // [rows, vocab]
    pub rows_of: &'a CudaSlice<i32>, // [rows]
    pub chosen: &'a CudaSlice<i32>,  // [logits rows]
    pub n_top: &'a CudaSlice<i32>,   // [rows]
    pub lp: &'a mut CudaSlice<f32>,  // [rows, 1 + MAX_TOP_LOGPROBS]
    pub ids: &'a mut CudaSlice<i32>, // [rows, MAX_TOP_LOGPROBS]
}

/// Each row's chosen-token logprob and its most likely alternatives, under the raw logits.
/// `rows_of` must name rows of `chosen` (the sampler's output), which the caller lays out.
pub fn row_logprobs(gpu: &Gpu, b: LogprobRows<'_>, rows: usize, vocab: usize) -> Result<()> {
    need(
        "row_logprobs",
        &[
            ("raw", b.raw.len(), rows * vocab),
            ("rows_of", b.rows_of.len(), rows),
            ("n_top", b.n_top.len(), rows),
            ("lp", b.lp.len(), rows * (1 + MAX_TOP_LOGPROBS)),
            ("ids", b.ids.len(), rows * MAX_TOP_LOGPROBS),
        ],
    )?;
    if rows == 0 {
        return Ok(());
    }
    let v = int(vocab, "vocab")?;
    let f = gpu.function("row_logprobs")?;
    // SAFETY: (const float*, const int*, const int*, const int*, float*, int*, int) as in
    // sampling.cu; block k reads raw row k, rows_of[k], n_top[k] and chosen[rows_of[k]] (the
    // caller's rows of the sampler output it passes), and writes row k of lp and ids.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(b.raw)
            .arg(b.rows_of)
            .arg(b.chosen)
            .arg(b.n_top)
            .arg(b.lp)
            .arg(b.ids)
            .arg(&v)
            .launch(grid(rows, 1, 1, THREADS)?)
    }?;
    Ok(())
}
