//! Finding the CUDA libraries (driver, NVRTC, cuBLAS) and proving they load, so that cudarc —
//! which panics when a library is missing — is only ever called once they are present.
//!
//! cudarc (built with `cuda-13000`) dlopens names such as `libnvrtc.so`, `libnvrtc.so.13` and
//! `libnvrtc.so.12` from the loader's default path. Libraries elsewhere (a CUDA toolkit outside
//! the loader path, PyPI wheels) are found here in [`search_dirs`] and loaded by absolute path
//! first: the dynamic loader then answers cudarc's later `dlopen("libnvrtc.so.13")` with the
//! already-loaded object, because it matches loaded libraries by their SONAME.
//!
//! NVRTC and cuBLAS are loaded from one CUDA release: the newest whose NVRTC is found that the
//! driver (when present) runs. `release` then checks what actually loaded, since cudarc may
//! still find another release's library under a plain name such as `libnvrtc.so`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Colon-separated folders searched first for `libnvrtc`/`libcublas` (CUDA 12 or 13).
pub const LIB_DIRS_ENV: &str = "TOKENSCALE_CUDA_LIB_DIRS";

/// CUDA major versions whose libraries this binary accepts, newest first.
const MAJORS: [u32; 2] = [13, 12];

/// NVRTC and the builtins it loads, dependencies first: loaded together from one folder.
const NVRTC_GROUP: &[&str] = &["nvrtc-builtins", "nvrtc"];
/// cuBLAS and cuBLASLt, dependencies first: loaded together from one folder.
const CUBLAS_GROUP: &[&str] = &["cublasLt", "cublas"];

/// Folders searched for CUDA libraries, in order: [`LIB_DIRS_ENV`], then the usual toolkit
/// locations under `$CUDA_HOME`, `$CUDA_PATH` and `/usr/local/cuda`.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(LIB_DIRS_ENV)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    let roots = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda")));
    for root in roots {
        dirs.push(root.join("lib64"));
        dirs.push(root.join("targets/x86_64-linux/lib"));
        dirs.push(root.join("targets/sbsa-linux/lib"));
    }
    dirs
}

/// The file to load for library `lib` among a folder's file names: `lib{lib}.so.{major}` or
/// `lib{lib}.so.{major}.{minor…}` for a supported major (newest first; the shortest name, i.e.
/// the SONAME, among equals). Variants such as `libnvrtc.alt.so.12` never match.
pub fn pick_library<'a>(lib: &str, names: &'a [String]) -> Option<&'a str> {
    MAJORS
        .iter()
        .find_map(|&major| pick_library_of(lib, names, major))
}

/// Like [`pick_library`], for CUDA major `want` only.
pub fn pick_library_of<'a>(lib: &str, names: &'a [String], want: u32) -> Option<&'a str> {
    let prefix = format!("lib{lib}.so.");
    let major_of = |name: &str| -> Option<u32> {
        let version = name.strip_prefix(&prefix)?;
        let major = version.split('.').next()?.parse().ok()?;
        version
            .split('.')
            .all(|part| part.parse::<u32>().is_ok())
            .then_some(major)
    };
    names
        .iter()
        .filter(|n| major_of(n) == Some(want))
        .min_by_key(|n| n.len())
        .map(String::as_str)
}

/// Loads (and keeps loaded for the life of the process) NVRTC and cuBLAS of one release (see
/// [`choose_major`]), each group from the first search folder that holds all of it. Returns
/// the paths loaded; runs once.
pub fn preload() -> &'static [PathBuf] {
    static LOADED: OnceLock<Vec<PathBuf>> = OnceLock::new();
    LOADED.get_or_init(|| {
        let mut loaded = Vec::new();
        let dirs = search_dirs();
        let find = |group: &[&str], major: u32| dirs.iter().find_map(|d| group_in(d, group, major));
        let chosen = choose_major(
            |m| find(NVRTC_GROUP, m).is_some(),
            |m| find(CUBLAS_GROUP, m).is_some(),
            driver_major(),
        );
        let Some(major) = chosen else {
            return loaded;
        };
        for group in [NVRTC_GROUP, CUBLAS_GROUP] {
            if let Some(paths) = find(group, major) {
                for path in paths {
                    // SAFETY: loading a CUDA library runs its initialisers, which only set up
                    // the library's own state. The handle is leaked on purpose: the library
                    // must stay mapped for cudarc, which looks it up again by name.
                    if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
                        std::mem::forget(lib);
                        loaded.push(path);
                    }
                }
            }
        }
        loaded
    })
}

/// The release to load NVRTC and cuBLAS from: the newest whose NVRTC is found, else the newest
/// whose cuBLAS is; releases the driver runs (`driver_major` and older, when a driver is
/// present) first. A newer one is still taken when nothing else is found: compiling needs no
/// driver, and the backend's release check then names the driver as too old.
pub fn choose_major(
    has_nvrtc: impl Fn(u32) -> bool,
    has_cublas: impl Fn(u32) -> bool,
    driver_major: Option<u32>,
) -> Option<u32> {
    let runs = |m: u32| driver_major.is_none_or(|d| m <= d);
    let order: Vec<u32> = MAJORS
        .into_iter()
        .filter(|&m| runs(m))
        .chain(MAJORS.into_iter().filter(|&m| !runs(m)))
        .collect();
    let first = |has: &dyn Fn(u32) -> bool| order.iter().copied().find(|&m| has(m));
    first(&has_nvrtc).or_else(|| first(&has_cublas))
}

/// The CUDA major the driver runs at most, when a driver is present.
fn driver_major() -> Option<u32> {
    probe_driver().ok()?;
    super::symbols::driver_version().map(|v| (v / 1000) as u32)
}

/// The paths of all of `group`'s libraries of CUDA `major` in `dir`, or `None` unless every
/// one is there.
fn group_in(dir: &Path, group: &[&str], major: u32) -> Option<Vec<PathBuf>> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    group
        .iter()
        .map(|lib| pick_library_of(lib, &names, major).map(|n| dir.join(n)))
        .collect()
}

/// Why the CUDA backend cannot start on this machine, or `Ok` when the driver, NVRTC and
/// cuBLAS libraries all load. Never panics.
pub fn probe_libraries() -> Result<(), String> {
    probe_driver()?;
    probe_nvrtc()?;
    preload();
    // SAFETY: `is_culib_present` only tries to dlopen the library under its known names.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(format!(
            "cuBLAS library not found (libcublas.so.13 or .so.12); set {LIB_DIRS_ENV} or \
             LD_LIBRARY_PATH to the folder holding it"
        ));
    }
    Ok(())
}

/// `Ok` when the NVIDIA driver library (`libcuda.so.1`) loads.
pub fn probe_driver() -> Result<(), String> {
    // SAFETY: as above, a dlopen attempt only.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err("no CUDA driver: libcuda.so.1 not found (no NVIDIA GPU driver on this machine)".into())
    }
}

/// `Ok` when NVRTC (`libnvrtc.so.13` or `.so.12`) loads; enough to compile kernels.
pub fn probe_nvrtc() -> Result<(), String> {
    preload();
    // SAFETY: as above, a dlopen attempt only.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(format!(
            "NVRTC library not found (libnvrtc.so.13 or .so.12); set {LIB_DIRS_ENV} or \
             LD_LIBRARY_PATH to the folder holding it (e.g. the nvidia-cuda-nvrtc-cu12 wheel's \
             nvidia/cuda_nvrtc/lib)"
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn picks_the_soname_of_the_newest_supported_major() {
        let dir = names(&[
            "libnvrtc.so.12",
            "libnvrtc.so.13",
            "libnvrtc.so.13.0.48",
            "libnvrtc.so",
        ]);
        assert_eq!(pick_library("nvrtc", &dir), Some("libnvrtc.so.13"));
        let wheel = names(&[
            "libnvrtc.alt.so.12",
            "libnvrtc-builtins.so.12.9",
            "libnvrtc-builtins.alt.so.12.9",
            "libnvrtc.so.12",
        ]);
        assert_eq!(pick_library("nvrtc", &wheel), Some("libnvrtc.so.12"));
        assert_eq!(
            pick_library("nvrtc-builtins", &wheel),
            Some("libnvrtc-builtins.so.12.9")
        );
    }

    #[test]
    fn rejects_other_majors_and_lookalikes() {
        let dir = names(&[
            "libnvrtc.so.11.2",
            "libnvrtc.so.12x",
            "libcublasLt.so.13",
            "libnvrtc.so",
        ]);
        assert_eq!(pick_library("nvrtc", &dir), None);
        assert_eq!(pick_library("cublas", &dir), None);
        assert_eq!(pick_library("cublasLt", &dir), Some("libcublasLt.so.13"));
    }

    #[test]
    fn one_release_is_chosen_for_nvrtc_and_cublas() {
        let both = |m: u32| m == 12 || m == 13;
        let only12 = |m: u32| m == 12;
        let only13 = |m: u32| m == 13;
        let none = |_: u32| false;
        assert_eq!(choose_major(both, both, None), Some(13));
        assert_eq!(choose_major(both, both, Some(13)), Some(13));
        // A CUDA 12 driver gets the CUDA 12 set even where CUDA 13 is installed too.
        assert_eq!(choose_major(both, both, Some(12)), Some(12));
        // NVRTC decides; cuBLAS only when no NVRTC is found.
        assert_eq!(choose_major(only12, only13, None), Some(12));
        assert_eq!(choose_major(none, only13, Some(13)), Some(13));
        // Only a release newer than the driver: taken (compiling needs no driver).
        assert_eq!(choose_major(only13, none, Some(12)), Some(13));
        assert_eq!(choose_major(none, none, None), None);
    }

    #[test]
    fn a_group_is_taken_only_when_complete() {
        let scratch = tokenscale_scratch::Scratch::in_temp_dir("cuda-libs");
        let dir = scratch.path();
        std::fs::write(dir.join("libcublas.so.12"), b"").unwrap();
        assert!(group_in(dir, CUBLAS_GROUP, 12).is_none());
        std::fs::write(dir.join("libcublasLt.so.12"), b"").unwrap();
        let found = group_in(dir, CUBLAS_GROUP, 12).unwrap();
        assert_eq!(
            found,
            vec![dir.join("libcublasLt.so.12"), dir.join("libcublas.so.12")]
        );
        // One release only: a CUDA 13 cuBLASLt does not complete a CUDA 12 cuBLAS.
        std::fs::remove_file(dir.join("libcublasLt.so.12")).unwrap();
        std::fs::write(dir.join("libcublasLt.so.13"), b"").unwrap();
        assert!(group_in(dir, CUBLAS_GROUP, 12).is_none());
        assert!(group_in(dir, CUBLAS_GROUP, 13).is_none());
    }
}
