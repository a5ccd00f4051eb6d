//! `silu_mul.cu`: the SwiGLU gate.

use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use super::{grid, int, need};
use crate::backend::cuda::{Gpu, Result};

/// `out[t, j] = silu(gate_up[t, j]) * gate_up[t, ffn + j]` in bf16.
pub fn silu_mul(
    gpu: &Gpu,
    gate_up: &CudaSlice<f32>,  // [tokens, 2 * ffn]
    out: &mut CudaSlice<bf16>, // [tokens, ffn]
    tokens: usize,
    ffn: usize,
) -> Result<()> {
    need(
        "silu_mul",
        &[
            ("gate_up", gate_up.len(), 2 * tokens * ffn),
            ("out", out.len(), tokens * ffn),
        ],
    )?;
    if tokens * ffn == 0 {
        return Ok(());
    }
    let (t, f_) = (int(tokens, "tokens")?, int(ffn, "ffn")?);
    let f = gpu.function("silu_mul")?;
    // SAFETY: (const float*, bf16*, int, int) as in silu_mul.cu; thread i < tokens·ffn (the
    // kernel returns past it) reads two elements of row i / ffn and writes out[i].
    unsafe {
        gpu.stream
            .launch_builder(f)
            .arg(gate_up)
            .arg(out)
            .arg(&t)
            .arg(&f_)
            .launch(grid((tokens * ffn).div_ceil(256), 1, 1, 256)?)
    }?;
    Ok(())
}
