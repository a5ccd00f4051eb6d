//! One opened GPU: its context and stream, what it is, and the kernels compiled for it.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;

use super::compile::{self, Arch};
use super::kernels::SOURCES;
use super::{Error, Result};

/// What the device is.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    pub sm_count: usize,
    pub total_bytes: usize,
    pub nvrtc_version: (i32, i32),
}

/// An opened GPU with every kernel loaded.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    /// The one stream all work runs on (a non-default stream, so it can be captured).
    pub stream: Arc<CudaStream>,
    pub info: DeviceInfo,
    functions: HashMap<&'static str, CudaFunction>,
}

impl Gpu {
    /// Opens GPU `ordinal`, compiles (or loads from the cache) every kernel for its
    /// architecture and loads them. Fails with a clear error where CUDA is unusable.
    pub fn open(ordinal: usize) -> Result<Self> {
        super::available().map_err(Error::Unavailable)?;
        let ctx = catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| Error::Unavailable("CUDA context creation panicked".into()))??;
        // SAFETY: all work runs on one stream, so cudarc's cross-stream event tracking is not
        // needed; it would also record events inside graph captures.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let attr = |a| ctx.attribute(a).map(|v| v.max(0) as u32);
        let cc = (
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        if cc.0 < 8 {
            return Err(Error::Unavailable(format!(
                "GPU compute capability {}.{} lacks bf16 support (needs 8.0 or newer)",
                cc.0, cc.1
            )));
        }
        let info = DeviceInfo {
            name: ctx.name()?,
            compute_capability: cc,
            sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize,
            total_bytes: ctx.total_mem()?,
            nvrtc_version: compile::nvrtc_version()?,
        };
        let functions = load_kernels(&ctx, Arch::for_device(cc.0, cc.1), info.nvrtc_version)?;
        Ok(Self {
            ctx,
            stream,
            info,
            functions,
        })
    }

    /// Kernel `name` (one of [`super::kernels::SOURCES`]' kernels).
    pub fn function(&self, name: &str) -> Result<&CudaFunction> {
        self.functions
            .get(name)
            .ok_or_else(|| Error::Driver(format!("kernel {name} is not loaded")))
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(usize, usize)> {
        Ok(self.ctx.mem_get_info()?)
    }
}

/// Compiles every kernel file for `arch` through the disk cache and loads its kernels.
fn load_kernels(
    ctx: &Arc<CudaContext>,
    arch: Arch,
    nvrtc_version: (i32, i32),
) -> Result<HashMap<&'static str, CudaFunction>> {
    let cache = compile::default_cache_dir();
    let mut functions = HashMap::new();
    for source in SOURCES {
        let image = compile::compile_cached(source, arch, nvrtc_version, cache.as_deref())?;
        let module = catch_unwind(AssertUnwindSafe(|| {
            ctx.load_module(Ptx::from_binary(image))
        }))
        .map_err(|_| Error::Driver(format!("loading {} panicked", source.file)))??;
        for &name in source.kernels {
            functions.insert(name, module.load_function(name)?);
        }
    }
    Ok(functions)
}
