//! Compiling the kernel sources with NVRTC, and the on-disk cache of compiled images keyed by
//! source hash + target architecture (+ NVRTC version and options), so a restart skips NVRTC.

use std::ffi::{CStr, CString, c_char};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::{result, sys};
use sha2::{Digest, Sha256};

use super::Error;
use super::kernels::KernelSource;
use super::release::{self, HeaderDir, Version};

/// Colon-separated folders holding `cuda_bf16.h` / `cuda_fp16.h`, searched first; the one of
/// NVRTC's own release is used.
pub const INCLUDE_DIRS_ENV: &str = "TOKENSCALE_CUDA_INCLUDE_DIRS";
/// Folder of the compiled-kernel cache (default: the user's cache dir `tokenscale/kernels`).
pub const CACHE_DIR_ENV: &str = "TOKENSCALE_KERNEL_CACHE";

/// What NVRTC targets: virtual `compute_XY` (PTX, for checks and JIT) or real `sm_XY` (CUBIN
/// for the device at hand).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    Ptx { major: u32, minor: u32 },
    Cubin { major: u32, minor: u32 },
}

impl Arch {
    /// Parses `compute_90`, `sm_90` or `sm_90a`-less forms; majors 7..=12 only.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = || Error::BadArch(text.to_string());
        let (kind, digits) = if let Some(d) = text.strip_prefix("compute_") {
            (false, d)
        } else if let Some(d) = text.strip_prefix("sm_") {
            (true, d)
        } else {
            return Err(bad());
        };
        if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        let (major, minor) = (
            major.parse().map_err(|_| bad())?,
            minor.parse().map_err(|_| bad())?,
        );
        if !(7..=12).contains(&major) {
            return Err(bad());
        }
        Ok(if kind {
            Self::Cubin { major, minor }
        } else {
            Self::Ptx { major, minor }
        })
    }

    /// The real architecture of a device of compute capability `major.minor`.
    pub fn for_device(major: u32, minor: u32) -> Self {
        Self::Cubin { major, minor }
    }

    /// The `--gpu-architecture` value.
    pub fn flag(self) -> String {
        match self {
            Self::Ptx { major, minor } => format!("compute_{major}{minor}"),
            Self::Cubin { major, minor } => format!("sm_{major}{minor}"),
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.flag())
    }
}

/// NVRTC options for `arch`: fp32 math with exact division and sqrt (parity with the CPU
/// reference matters more than the last percent of a launch-bound kernel).
pub fn options(arch: Arch, include_dirs: &[PathBuf]) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={}", arch.flag()),
        "--std=c++17".to_string(),
        "--fmad=true".to_string(),
        "-default-device".to_string(),
    ];
    opts.extend(
        include_dirs
            .iter()
            .map(|d| format!("--include-path={}", d.display())),
    );
    opts
}

/// The cache key of one compiled program: sha256 over the program text, target, NVRTC version
/// and options (include paths excluded: the same headers may live anywhere).
pub fn cache_key(program: &str, arch: Arch, nvrtc_version: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(program.as_bytes());
    h.update(format!(
        "\0{}\0nvrtc {}.{}\0",
        arch.flag(),
        nvrtc_version.0,
        nvrtc_version.1
    ));
    for opt in options(arch, &[]) {
        h.update(opt.as_bytes());
        h.update(b"\0");
    }
    let digest = h.finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Folders holding `cuda_bf16.h`, with their release: [`INCLUDE_DIRS_ENV`], then
/// `$CUDA_HOME/include`, `$CUDA_PATH/include`, `/usr/local/cuda/include`. Only folders that hold
/// the header count.
pub fn header_dirs() -> Vec<HeaderDir> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(INCLUDE_DIRS_ENV)
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            dirs.push(PathBuf::from(root).join("include"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/include"));
    dirs.retain(|d| d.join("cuda_bf16.h").is_file());
    dirs.dedup();
    dirs.into_iter()
        .map(|dir| HeaderDir {
            version: release::header_version(&dir),
            dir,
        })
        .collect()
}

/// The include folders for NVRTC `nvrtc_version`: the headers of its own release (and their
/// CCCL), or an error naming the releases found when none matches.
pub fn include_dirs(nvrtc_version: (i32, i32)) -> Result<Vec<PathBuf>, Error> {
    let nvrtc = Version::new(nvrtc_version.0, nvrtc_version.1);
    release::headers_for(nvrtc, &header_dirs()).map_err(Error::Unavailable)
}

/// The NVRTC version `(major, minor)`. Call only after [`super::libs::probe_nvrtc`] succeeded.
pub fn nvrtc_version() -> Result<(i32, i32), Error> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers; the library is loaded (probed by the caller).
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::Nvrtc(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// Compiles one kernel file for `arch`: PTX text (NUL-free) for `compute_*`, a CUBIN for `sm_*`.
/// Call only after [`super::libs::probe_nvrtc`] succeeded.
pub fn compile(
    source: &KernelSource,
    arch: Arch,
    include_dirs: &[PathBuf],
) -> Result<Vec<u8>, Error> {
    let program = CString::new(source.program())
        .map_err(|_| Error::Nvrtc(format!("{}: source holds a NUL byte", source.file)))?;
    let name = CString::new(source.file).map_err(|_| Error::Nvrtc("bad file name".into()))?;
    let prog = result::create_program(&program, Some(&name))
        .map_err(|e| Error::Nvrtc(format!("{}: nvrtcCreateProgram: {e:?}", source.file)))?;
    let opts = options(arch, include_dirs);
    // SAFETY: `prog` was just created and is destroyed exactly once below.
    let out = unsafe { compile_created(prog, &opts, arch) }.map_err(|log| Error::Compile {
        file: source.file,
        arch: arch.flag(),
        log,
    });
    // SAFETY: as above; destroying cannot fail in a way we could act on.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// # Safety
/// `prog` must be a live program from `create_program`.
unsafe fn compile_created(
    prog: sys::nvrtcProgram,
    opts: &[String],
    arch: Arch,
) -> Result<Vec<u8>, String> {
    // SAFETY: per this function's contract.
    if let Err(e) = unsafe { result::compile_program(prog, opts) } {
        // SAFETY: per this function's contract.
        let log = unsafe { result::get_program_log(prog) }
            .map(|l| c_text(&l))
            .unwrap_or_default();
        return Err(format!("{e:?}: {}", log.trim()));
    }
    match arch {
        Arch::Ptx { .. } => {
            // SAFETY: per this function's contract; the program compiled.
            let ptx =
                unsafe { result::get_ptx(prog) }.map_err(|e| format!("nvrtcGetPTX: {e:?}"))?;
            Ok(c_text(&ptx).into_bytes())
        }
        Arch::Cubin { .. } => {
            let mut size = 0usize;
            // SAFETY: per this function's contract; `size` is a valid out-pointer.
            unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }
                .result()
                .map_err(|e| format!("nvrtcGetCUBINSize: {e:?}"))?;
            let mut cubin = vec![0u8; size];
            // SAFETY: `cubin` holds exactly the `size` bytes NVRTC reported.
            unsafe { sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast::<c_char>()) }
                .result()
                .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
            Ok(cubin)
        }
    }
}

/// The text of a NUL-terminated buffer NVRTC filled.
fn c_text(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    CStr::from_bytes_until_nul(&[bytes.as_slice(), b"\0"].concat())
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Default cache folder: [`CACHE_DIR_ENV`], else `$XDG_CACHE_HOME/tokenscale/kernels`, else
/// `$HOME/.cache/tokenscale/kernels`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_DIR_ENV) {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("tokenscale").join("kernels"))
}

/// Compiles `source` for `arch`, or reads the image a previous run stored under its key in
/// `cache_dir`. A cache that cannot be written is not an error (the next start recompiles).
pub fn compile_cached(
    source: &KernelSource,
    arch: Arch,
    nvrtc_version: (i32, i32),
    cache_dir: Option<&Path>,
) -> Result<Vec<u8>, Error> {
    let key = cache_key(&source.program(), arch, nvrtc_version);
    let path = cache_dir.map(|d| d.join(format!("{}-{}-{key}.bin", source.file, arch.flag())));
    if let Some(image) = path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .filter(|i| !i.is_empty())
    {
        return Ok(image);
    }
    let image = compile(source, arch, &include_dirs(nvrtc_version)?)?;
    if let Some(path) = path {
        // Write to a temporary name and rename, so a concurrent start never reads half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let stored = path
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .is_ok()
            && std::fs::write(&tmp, &image).is_ok()
            && std::fs::rename(&tmp, &path).is_ok();
        if !stored {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(path = %path.display(), "could not store compiled kernel in the cache");
        }
    }
    Ok(image)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::backend::cuda::kernels::SOURCES;

    #[test]
    fn parses_architectures() {
        assert_eq!(
            Arch::parse("compute_90").unwrap(),
            Arch::Ptx { major: 9, minor: 0 }
        );
        assert_eq!(
            Arch::parse("sm_80").unwrap(),
            Arch::Cubin { major: 8, minor: 0 }
        );
        assert_eq!(
            Arch::parse("sm_120").unwrap(),
            Arch::Cubin {
                major: 12,
                minor: 0
            }
        );
        assert_eq!(Arch::for_device(8, 6).flag(), "sm_86");
        for bad in [
            "",
            "90",
            "compute_",
            "compute_9x",
            "sm_52",
            "sm_1000",
            "compute_90a",
        ] {
            assert!(Arch::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn cache_key_changes_with_source_arch_and_nvrtc_but_not_include_paths() {
        let program = SOURCES[0].program();
        let arch = Arch::parse("sm_90").unwrap();
        let key = cache_key(&program, arch, (12, 9));
        assert_eq!(key.len(), 64);
        assert_eq!(key, cache_key(&program, arch, (12, 9)));
        assert_ne!(key, cache_key(&(program.clone() + " "), arch, (12, 9)));
        assert_ne!(
            key,
            cache_key(&program, Arch::parse("sm_80").unwrap(), (12, 9))
        );
        assert_ne!(
            key,
            cache_key(&program, Arch::parse("compute_90").unwrap(), (12, 9))
        );
        assert_ne!(key, cache_key(&program, arch, (13, 0)));
    }

    #[test]
    fn options_name_the_target_and_every_include_path() {
        let opts = options(
            Arch::parse("compute_80").unwrap(),
            &[PathBuf::from("/x/include")],
        );
        assert!(opts.contains(&"--gpu-architecture=compute_80".to_string()));
        assert!(opts.contains(&"--include-path=/x/include".to_string()));
    }

    #[test]
    fn cached_image_is_returned_without_compiling() {
        let scratch = tokenscale_scratch::Scratch::in_temp_dir("kernel-cache");
        let dir = scratch.path();
        let (source, arch) = (&SOURCES[0], Arch::parse("sm_90").unwrap());
        let key = cache_key(&source.program(), arch, (12, 9));
        let file = dir.join(format!("{}-sm_90-{key}.bin", source.file));
        std::fs::write(&file, b"cubin bytes").unwrap();
        // No NVRTC is loaded in unit tests: a hit must not reach the compiler.
        let image = compile_cached(source, arch, (12, 9), Some(dir)).unwrap();
        assert_eq!(image, b"cubin bytes");
    }
}
