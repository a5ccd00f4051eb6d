//! `rmsnorm.cu`: RMSNorm fused with the residual add before it.

use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use super::{grid, int, need};
use crate::backend::cuda::{Gpu, Result};

/// `residual += delta` (when given), then `out = residual / rms(residual) * weight` in bf16,
/// for `tokens` rows of `hidden`.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_residual(
    gpu: &Gpu,
    residual: &mut CudaSlice<f32>,  // [tokens, hidden]
    delta: Option<&CudaSlice<f32>>, // [tokens, hidden]
    weight: &CudaSlice<f32>,        // [hidden]
    out: &mut CudaSlice<bf16>,      // [tokens, hidden]
    tokens: usize,
    hidden: usize,
    eps: f32,
) -> Result<()> {
    let n = tokens * hidden;
    need(
        "rmsnorm_residual",
        &[
            ("residual", residual.len(), n),
            ("delta", delta.map_or(n, |d| d.len()), n),
            ("weight", weight.len(), hidden),
            ("out", out.len(), n),
        ],
    )?;
    if tokens == 0 {
        return Ok(());
    }
    let h = int(hidden, "hidden")?;
    let null: u64 = 0;
    let f = gpu.function("rmsnorm_residual")?;
    let mut launch = gpu.stream.launch_builder(f);
    launch.arg(residual);
    match delta {
        Some(d) => launch.arg(d),
        None => launch.arg(&null), // the kernel's `delta == nullptr`: no add
    };
    launch.arg(weight).arg(out).arg(&h).arg(&eps);
    // SAFETY: (float*, const float*, const float*, bf16*, int, float) as in rmsnorm.cu, `delta`
    // a null pointer when absent. Block t touches row t of residual, delta and out and all of
    // `weight`: inside the sizes checked above.
    unsafe { launch.launch(grid(tokens, 1, 1, 256)?) }?;
    Ok(())
}
