//! The linear layers through cuBLAS: `y[rows, out] = x[rows, in] · w[out, in]ᵀ` with bf16
//! inputs, fp32 accumulation and fp32 outputs (tensor cores; cuBLAS picks the algorithm).

use std::ffi::c_void;

use cudarc::cublas::{CudaBlas, result, sys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use half::bf16;

use super::Result;

/// Workspace handed to cuBLAS, so that it never allocates while a CUDA graph is captured.
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// Gives `blas` the fixed workspace `ws` (kept alive by the caller as long as `blas`).
pub fn set_workspace(blas: &CudaBlas, stream: &CudaStream, ws: &mut CudaSlice<u8>) -> Result<()> {
    let len = ws.len();
    let (ptr, _sync) = ws.device_ptr_mut(stream);
    // SAFETY: `ws` is a live device allocation of `ws.len()` bytes that outlives `blas` (both
    // are owned by the backend, which drops `blas` first).
    unsafe { sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut c_void, len) }.result()?;
    Ok(())
}

/// `y[rows, out_dim] = x[rows, in_dim] · w[out_dim, in_dim]ᵀ`, all row-major. cuBLAS is
/// column-major, so this computes `yᵀ = w · xᵀ` with `w` transposed in place of `w` itself.
#[allow(clippy::too_many_arguments)]
pub fn linear(
    blas: &CudaBlas,
    stream: &CudaStream,
    x: &CudaSlice<bf16>,
    w: &CudaSlice<bf16>,
    y: &mut CudaSlice<f32>,
    rows: usize,
    in_dim: usize,
    out_dim: usize,
) -> Result<()> {
    debug_assert!(
        x.len() >= rows * in_dim && w.len() >= out_dim * in_dim && y.len() >= rows * out_dim
    );
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (xp, _sx) = x.device_ptr(stream);
    let (wp, _sw) = w.device_ptr(stream);
    let (yp, _sy) = y.device_ptr_mut(stream);
    // SAFETY: the three buffers hold at least the elements the shapes imply (checked above in
    // debug builds and by construction in the forward pass); alpha and beta are fp32 as the
    // CUBLAS_COMPUTE_32F compute type requires.
    unsafe {
        result::gemm_ex(
            *blas.handle(),
            sys::cublasOperation_t::CUBLAS_OP_T,
            sys::cublasOperation_t::CUBLAS_OP_N,
            out_dim as i32,
            rows as i32,
            in_dim as i32,
            (&alpha as *const f32).cast(),
            wp as *const c_void,
            sys::cudaDataType::CUDA_R_16BF,
            in_dim as i32,
            xp as *const c_void,
            sys::cudaDataType::CUDA_R_16BF,
            in_dim as i32,
            (&beta as *const f32).cast(),
            yp as *mut c_void,
            sys::cudaDataType::CUDA_R_32F,
            out_dim as i32,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }?;
    Ok(())
}
