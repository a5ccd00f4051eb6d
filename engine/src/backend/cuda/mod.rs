//! The CUDA backend: the Llama-family forward on an NVIDIA GPU through cudarc.
//!
//! Nothing here needs CUDA at build time: cudarc loads the driver, NVRTC and cuBLAS at run
//! time (`libs` finds CUDA 12 or 13 libraries and proves they load before cudarc may touch
//! them, since cudarc panics on a missing library), and the kernels are CUDA C (`kernels/`)
//! compiled by NVRTC at start-up for the device's architecture, cached on disk (`compile`).
//! GEMMs run in cuBLAS (bf16 inputs, fp32 accumulation and outputs, tensor cores); weights are
//! bf16 on the device (uploaded as stored from bf16 checkpoints, rounded from anything else); decode steps replay CUDA graphs captured per batch bucket.
//!
//! Layout: pure host-side decisions (`geometry`, `buckets`, `memory`, `plan`) are unit-tested
//! without a GPU; `launch` is the typed boundary to the kernels (one checked wrapper per
//! kernel); `device`, `weights`, `forward` and `backend` are the thin device shells.

pub mod buckets;
pub mod check;
pub mod compile;
pub mod geometry;
pub mod kernels;
pub mod launch;
pub mod libs;
pub mod memory;
pub mod plan;
pub mod prefill;
pub mod release;
pub mod sample_model;
pub mod symbols;
pub mod table_upload;

mod backend;
mod device;
mod device_sampler;
mod fault;
mod forward;
mod gemm;
mod options;
mod weights;

pub use backend::CudaBackend;
pub use device::{DeviceInfo, Gpu};
pub use options::{CudaOptions, DeviceSampling};
pub use prefill::PrefillAttention;
pub use weights::{DeviceWeights, tensor_bf16, tensor_f32};

/// Errors of the CUDA backend. Every one names what failed; none is a panic.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The backend cannot run on this machine (no driver, no GPU, a library missing).
    #[error("{0}")]
    Unavailable(String),
    #[error("bad --arch {0:?}: expected compute_XY or sm_XY, e.g. compute_90")]
    BadArch(String),
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    #[error("compiling {file} for {arch}: {log}")]
    Compile {
        file: &'static str,
        arch: String,
        log: String,
    },
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// A sticky driver error (see `fault::is_sticky`): the context is unusable from now on.
    #[error("CUDA driver: {0} (sticky: the context is unusable until the process restarts)")]
    DeviceLost(String),
    #[error("cuBLAS: {0}")]
    Cublas(String),
    /// The model cannot run on this backend (shape, missing tensor, bad tensor type).
    #[error("model: {0}")]
    Model(String),
    /// A forward step was asked for something inconsistent (bad block table, token id, …).
    #[error("step: {0}")]
    Step(String),
}

impl From<Error> for crate::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::DeviceLost(_) => crate::Error::DeviceLost {
                backend: "cuda",
                message: e.to_string(),
            },
            _ => crate::Error::Backend {
                backend: "cuda",
                message: e.to_string(),
            },
        }
    }
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        // The code's name, not `DriverError`'s `Debug`: that asks the driver for a description
        // (one more driver call, which panics where no driver is loaded).
        let code = format!("{:?}", e.0);
        if fault::is_sticky(e.0) {
            Error::DeviceLost(code)
        } else {
            Error::Driver(code)
        }
    }
}

impl From<cudarc::cublas::result::CublasError> for Error {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        Error::Cublas(format!("{e:?}"))
    }
}

/// The CUDA backend's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether the CUDA backend can start here: `Ok` when the driver, NVRTC and cuBLAS load, export
/// every entry point the engine calls, are of one CUDA release that the driver runs, and at
/// least one GPU is visible, else a one-line reason (e.g. "no CUDA driver: …"). Never panics;
/// cheap enough to call for `--backend auto`.
pub fn available() -> Result<(), String> {
    libs::probe_libraries()?;
    // Before any cudarc call may resolve a symbol the library lacks (it would panic).
    symbols::check_entry_points()?;
    release::check_loaded()?;
    let count = std::panic::catch_unwind(cudarc::driver::CudaContext::device_count)
        .map_err(|_| "CUDA driver library failed to initialise".to_string())?
        .map_err(|e| format!("CUDA driver initialisation failed: {e:?}"))?;
    if count < 1 {
        return Err("CUDA driver present but no GPU is visible".into());
    }
    Ok(())
}

/// What `--backend` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    /// CUDA when a usable GPU is present, else the CPU.
    #[default]
    Auto,
    /// The CPU reference backend.
    Cpu,
    /// CUDA, or fail with the reason it is unusable.
    Cuda,
}

/// Whether `choice` runs on CUDA here: `Cuda` gives `Err(reason)` when CUDA is unusable (e.g.
/// "no CUDA driver: …"), `Auto` falls back to the CPU quietly. Never panics.
pub fn use_cuda(choice: BackendChoice) -> Result<bool, String> {
    match choice {
        BackendChoice::Cpu => Ok(false),
        BackendChoice::Cuda => available().map(|()| true),
        BackendChoice::Auto => Ok(available().is_ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_never_needs_cuda_and_auto_follows_availability() {
        assert_eq!(use_cuda(BackendChoice::Cpu), Ok(false));
        let here = available();
        assert_eq!(use_cuda(BackendChoice::Auto), Ok(here.is_ok()));
        assert_eq!(use_cuda(BackendChoice::Cuda), here.map(|()| true));
    }
}
