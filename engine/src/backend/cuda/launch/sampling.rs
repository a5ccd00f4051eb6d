//! `sampling.cu`: greedy and top-k / top-p sampling of logits rows on the device.

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{grid, int, need};
use crate::backend::cuda::{Gpu, Result};

/// Threads per row (the kernels' `SAMPLE_THREADS` launch bound).
const THREADS: u32 = 1024;

/// `out[r] = argmax(logits[r])` (lowest id on ties) for `rows` rows of `vocab`.
pub fn argmax_rows(
    gpu: &Gpu,
    logits: &CudaSlice<f32>,  // [rows, vocab]
    out: &mut CudaSlice<i32>, // [rows]
    rows: usize,
    vocab: usize,
) -> Result<()> {
    need(
        "argmax_rows",
        &[
            ("logits", logits.len(), rows * vocab),
            ("out", out.len(), rows),
        ],
    )?;
    if rows == 0 {
        return Ok(());
    }
    let v = int(vocab, "vocab")?;
    let f = gpu.function("argmax_rows")?;
    // SAFETY: (const float*, int*, int) as in sampling.cu; block r reads row r and writes
    // out[r], inside the sizes checked above.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(logits)
            .arg(out)
            .arg(&v)
            .launch(grid(rows, 1, 1, THREADS)?)
    }?;
    Ok(())
}

/// Per-row sampling settings on the device, `[rows]` each.
pub struct SamplingRows<'a> {
    /// `<= 0`: greedy.
    pub temperature: &'a CudaSlice<f32>,
    /// `0`: no top-k cut.
    pub top_k: &'a CudaSlice<i32>,
    pub top_p: &'a CudaSlice<f32>,
    /// One uniform number in [0, 1) per row.
    pub uniforms: &'a CudaSlice<f32>,
}

/// Samples one token per row of `logits` with that row's settings.
pub fn sample_top_k_top_p(
    gpu: &Gpu,
    logits: &CudaSlice<f32>, // [rows, vocab]
    s: &SamplingRows<'_>,
    out: &mut CudaSlice<i32>, // [rows]
    rows: usize,
    vocab: usize,
) -> Result<()> {
    need(
        "sample_top_k_top_p",
        &[
            ("logits", logits.len(), rows * vocab),
            ("temperature", s.temperature.len(), rows),
            ("top_k", s.top_k.len(), rows),
            ("top_p", s.top_p.len(), rows),
            ("uniforms", s.uniforms.len(), rows),
            ("out", out.len(), rows),
        ],
    )?;
    if rows == 0 {
        return Ok(());
    }
    let v = int(vocab, "vocab")?;
    let f = gpu.function("sample_top_k_top_p")?;
    // SAFETY: (const float*, const float*, const int*, const float*, const float*, int*, int)
    // as in sampling.cu; block r reads row r of every input and writes out[r].
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(logits)
            .arg(s.temperature)
            .arg(s.top_k)
            .arg(s.top_p)
            .arg(s.uniforms)
            .arg(out)
            .arg(&v)
            .launch(grid(rows, 1, 1, THREADS)?)
    }?;
    Ok(())
}

/// Sets to −∞ every logit its row's mask disallows: `mask` is `[rows, words]` bits, bit `i % 32`
/// of word `i / 32` allowing token `i` (grammar masks of structured outputs).
pub fn apply_token_mask(
    gpu: &Gpu,
    logits: &mut CudaSlice<f32>, // [rows, vocab]
    mask: &CudaSlice<u32>,       // [rows, words]
    rows: usize,
    vocab: usize,
) -> Result<()> {
    let words = vocab.div_ceil(32);
    need(
        "apply_token_mask",
        &[
            ("logits", logits.len(), rows * vocab),
            ("mask", mask.len(), rows * words),
        ],
    )?;
    if rows == 0 {
        return Ok(());
    }
    let (v, w) = (int(vocab, "vocab")?, int(words, "words")?);
    let f = gpu.function("apply_token_mask")?;
    // SAFETY: (float*, const unsigned int*, int, int) as in sampling.cu; block (r, y) touches
    // logits of row r at ids y * 256 .. below vocab, and mask words of row r below words.
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(logits)
            .arg(mask)
            .arg(&v)
            .arg(&w)
            .launch(grid(
                rows,
                vocab.div_ceil(MASK_THREADS as usize),
                1,
                MASK_THREADS,
            )?)
    }?;
    Ok(())
}

/// Threads per block of `apply_token_mask` (one logit each).
const MASK_THREADS: u32 = 256;
