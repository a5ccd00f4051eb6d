//! Start-up proof that the loaded CUDA libraries export every entry point the engine reaches
//! through cudarc. cudarc resolves each symbol on its first call and panics when one is
//! missing (a driver older than the calls need, a stripped library); checked here, a missing
//! one is an error at start-up that names the symbols and the driver version, never a panic
//! in the middle of a request.
//!
//! The lists follow the cudarc calls the backend makes (`device`, `weights`, `forward`,
//! `backend`, `gemm`, `compile`, `check`), mapped to the driver functions cudarc 0.19's safe
//! API calls for them. A test keeps the direct `sys::` calls of this folder in the lists.

use std::ffi::c_int;

use cudarc::driver::sys::CUresult;

/// Driver functions, by the cudarc call that reaches them.
pub const DRIVER: &[&str] = &[
    // `CudaContext::device_count`, `new` (primary context, memory-pool attribute), `Drop`,
    // and the thread binding every call does.
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDeviceGetAttribute",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    // `name`, `total_mem`, `mem_get_info`.
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuMemGetInfo_v2",
    // Streams: `new_stream`, `synchronize` (also inside `clone_dtoh`), `Drop`.
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuStreamDestroy_v2",
    // Memory: `alloc_zeros` (pool allocation where the device supports it, else plain),
    // `clone_htod`, `memcpy_htod`, `clone_dtoh`, `memcpy_dtod`, and the slices' `Drop`.
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemsetD8Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    // Pinned host buffers (`alloc_pinned_with_flags`, their `Drop`) and the event each one
    // carries, recorded and waited on by every copy through it (`device_sampler`).
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuStreamWaitEvent",
    // Kernels: `load_module`, `load_function`, `launch`.
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuLaunchKernel",
    // Decode graphs: `begin_capture`, `end_capture`, `upload`, `launch`, `Drop`.
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphUpload",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
    // `DriverError`'s `Debug` (the reason `available` gives when initialisation fails).
    "cuGetErrorString",
];

/// NVRTC functions: `compile` calls them directly or through `cudarc::nvrtc::result`.
pub const NVRTC: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcDestroyProgram",
];

/// cuBLAS functions: `CudaBlas::new` and `Drop`, and what `gemm` calls.
pub const CUBLAS: &[&str] = &[
    "cublasCreate_v2",
    "cublasSetStream_v2",
    "cublasDestroy_v2",
    "cublasSetWorkspace_v2",
    "cublasGemmEx",
];

/// The names of `wanted` that `has` does not find, in order.
pub fn missing<'a>(wanted: &[&'a str], has: impl Fn(&str) -> bool) -> Vec<&'a str> {
    wanted.iter().copied().filter(|name| !has(name)).collect()
}

/// The error for `library` lacking `missing`: the driver's version (as `cuDriverGetVersion`
/// reports it, e.g. 12040 for 12.4) says which driver is too old.
pub fn missing_message(library: &str, driver_version: Option<i32>, missing: &[&str]) -> String {
    let driver = match driver_version {
        Some(v) => format!("CUDA driver {}.{} ({v})", v / 1000, v % 1000 / 10),
        None => "a CUDA driver whose version is unknown".to_string(),
    };
    format!(
        "{library} lacks {} that this engine calls (with {driver}); install a matching set \
         of CUDA libraries, or a newer NVIDIA driver",
        missing.join(", ")
    )
}

/// Checks that the driver, NVRTC and cuBLAS export every entry point in [`DRIVER`],
/// [`NVRTC`] and [`CUBLAS`]. Call only once `libs::probe_libraries` succeeded: cudarc's
/// library handles panic when a library is absent.
pub fn check_entry_points() -> Result<(), String> {
    // SAFETY: the probe loaded each library already, so `culib` returns the loaded handle;
    // looking a symbol up (never calling it) has no other effect.
    let libs = unsafe {
        [
            (
                "the CUDA driver (libcuda)",
                cudarc::driver::sys::culib(),
                DRIVER,
            ),
            ("NVRTC (libnvrtc)", cudarc::nvrtc::sys::culib(), NVRTC),
            ("cuBLAS (libcublas)", cudarc::cublas::sys::culib(), CUBLAS),
        ]
    };
    for (library, lib, wanted) in libs {
        // SAFETY: the symbol is only looked up, with a placeholder function type.
        let has =
            |name: &str| unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok();
        let absent = missing(wanted, has);
        if !absent.is_empty() {
            return Err(missing_message(library, driver_version(), &absent));
        }
    }
    Ok(())
}

/// The driver's CUDA version (e.g. 12040), asked without going through cudarc's lazy lookup.
/// Call only once `libs::probe_driver` succeeded.
pub(super) fn driver_version() -> Option<i32> {
    // SAFETY: the driver library is loaded (probed by the caller); `cuDriverGetVersion`
    // has this signature in every CUDA release and only writes the one integer it is given.
    unsafe {
        let lib = cudarc::driver::sys::culib();
        let get = lib
            .get::<unsafe extern "C" fn(*mut c_int) -> CUresult>(b"cuDriverGetVersion")
            .ok()?;
        let mut version: c_int = 0;
        (get(&mut version) == CUresult::CUDA_SUCCESS).then_some(version)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_every_missing_symbol_in_order() {
        let present = ["cuInit", "cuDeviceGet"];
        let absent = missing(
            &["cuInit", "cuGraphUpload", "cuDeviceGet", "cuLaunchKernel"],
            |n| present.contains(&n),
        );
        assert_eq!(absent, ["cuGraphUpload", "cuLaunchKernel"]);
        assert!(missing(DRIVER, |_| true).is_empty());
        assert_eq!(missing(NVRTC, |_| false), NVRTC);
    }

    #[test]
    fn the_error_names_the_symbols_and_the_driver_version() {
        let message = missing_message(
            "the CUDA driver (libcuda)",
            Some(12020),
            &["cuGraphUpload", "cuMemAllocAsync"],
        );
        assert!(
            message.contains("cuGraphUpload, cuMemAllocAsync"),
            "{message}"
        );
        assert!(message.contains("CUDA driver 12.2 (12020)"), "{message}");
        let unknown = missing_message("NVRTC (libnvrtc)", None, &["nvrtcGetCUBIN"]);
        assert!(unknown.contains("version is unknown"), "{unknown}");
    }

    /// Every function this folder calls through cudarc's `sys` modules directly is checked.
    #[test]
    fn the_lists_cover_every_direct_sys_call() {
        let listed: Vec<&str> = [DRIVER, NVRTC, CUBLAS].concat();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/backend/cuda");
        let mut files = vec![dir.clone()];
        let mut called = Vec::new();
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("symbols.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (at, _) in text.match_indices("sys::") {
                    let name: String = text[at + 5..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let is_call = text[at + 5 + name.len()..].starts_with('(');
                    // `culib` is cudarc's library handle, not a library function.
                    let is_function = ["cu", "nvrtc", "cublas"]
                        .iter()
                        .any(|p| name.starts_with(p))
                        && name != "culib";
                    if is_call && is_function {
                        called.push(name);
                    }
                }
            }
        }
        assert!(
            called.iter().any(|n| n == "nvrtcGetCUBIN"),
            "the scan found {called:?}"
        );
        for name in &called {
            assert!(
                listed.contains(&name.as_str()),
                "{name} is called but not checked"
            );
        }
    }
}
