//! One CUDA release for everything the backend uses: NVRTC, the headers it compiles the kernels
//! against (CCCL's included), cuBLAS, and a driver new enough for them.
//!
//! Libraries and headers are found in different places (a toolkit, NVIDIA's CUDA 12 wheels, the
//! CUDA 13 wheels, the loader path), so nothing guarantees they come from one release; NVIDIA
//! supports NVRTC only with the headers of its own release. The loaded libraries are the truth:
//! NVRTC's own version picks the header folder of its release, cuBLAS and the driver are asked
//! theirs, and a mix is an error that names each part and its version.

use std::ffi::c_int;
use std::path::{Path, PathBuf};

/// A CUDA version as the libraries and headers report it: `major * 1000 + minor * 10`
/// (13000 for 13.0, 12090 for 12.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub i32);

impl Version {
    pub fn new(major: i32, minor: i32) -> Self {
        Self(major * 1000 + minor * 10)
    }

    pub fn major(self) -> i32 {
        self.0 / 1000
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, self.0 % 1000 / 10)
    }
}

/// A folder holding `cuda_bf16.h`, with the release its headers belong to (`None`: unreadable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderDir {
    pub dir: PathBuf,
    pub version: Option<Version>,
}

/// The release of the headers in `dir`: `CUDART_VERSION` in `cuda_runtime_api.h`, else
/// `CUDA_VERSION` in `cuda.h` (both sit beside `cuda_bf16.h` in a toolkit and in the wheels).
pub fn header_version(dir: &Path) -> Option<Version> {
    [
        ("cuda_runtime_api.h", "CUDART_VERSION"),
        ("cuda.h", "CUDA_VERSION"),
    ]
    .iter()
    .find_map(|(file, name)| {
        let text = std::fs::read_to_string(dir.join(file)).ok()?;
        defined_number(&text, name).map(Version)
    })
}

/// The number in `#define NAME 12090`, if `text` has that line.
pub fn defined_number(text: &str, name: &str) -> Option<i32> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("#define") && words.next() == Some(name))
            .then(|| words.next()?.parse().ok())
            .flatten()
    })
}

/// The include folders for NVRTC of release `nvrtc`: the first of `found` whose headers are of
/// the same major, followed by its `cccl` folder where it has one (a CUDA 13 toolkit keeps
/// `<nv/target>`, which its fp16/bf16 headers include, only there). An error names NVRTC's
/// release and every header folder found with its release.
pub fn headers_for(nvrtc: Version, found: &[HeaderDir]) -> Result<Vec<PathBuf>, String> {
    let matching = found
        .iter()
        .find(|h| h.version.is_some_and(|v| v.major() == nvrtc.major()));
    if let Some(headers) = matching {
        let mut dirs = vec![headers.dir.clone()];
        let cccl = headers.dir.join("cccl");
        if cccl.join("nv").join("target").is_file() {
            dirs.push(cccl);
        }
        return Ok(dirs);
    }
    let seen: Vec<String> = found
        .iter()
        .map(|h| match h.version {
            Some(v) => format!("CUDA {v} in {}", h.dir.display()),
            None => format!("an unknown release in {}", h.dir.display()),
        })
        .collect();
    let seen = if seen.is_empty() {
        "none".to_string()
    } else {
        seen.join(", ")
    };
    Err(format!(
        "NVRTC {nvrtc} needs the CUDA {} headers (cuda_bf16.h) of its own release; headers \
         found: {seen}. Set {} to them (the nvidia-cuda-runtime and nvidia-cuda-cccl wheels \
         of that release, or its toolkit's include folder)",
        nvrtc.major(),
        super::compile::INCLUDE_DIRS_ENV
    ))
}

/// Checks that cuBLAS is of NVRTC's release and that the driver runs that release
/// (`driver`: the newest CUDA version it supports). Names both sides of a mismatch.
pub fn check_libraries(nvrtc: Version, cublas: Version, driver: Version) -> Result<(), String> {
    if cublas.major() != nvrtc.major() {
        return Err(format!(
            "CUDA libraries of two releases are loaded: NVRTC {nvrtc} and cuBLAS {cublas}; put \
             one release's libraries first in {} (or LD_LIBRARY_PATH)",
            super::libs::LIB_DIRS_ENV
        ));
    }
    if driver.major() < nvrtc.major() {
        return Err(format!(
            "the NVIDIA driver runs CUDA {driver} at most, older than the loaded CUDA {} \
             libraries (NVRTC {nvrtc}, cuBLAS {cublas}); install CUDA {} libraries or a newer \
             driver",
            nvrtc.major(),
            driver.major()
        ));
    }
    Ok(())
}

/// Asks the loaded NVRTC, cuBLAS and driver their versions and checks them together
/// ([`check_libraries`]). Call only once `symbols::check_entry_points` succeeded.
pub fn check_loaded() -> Result<(), String> {
    let (major, minor) = super::compile::nvrtc_version().map_err(|e| e.to_string())?;
    let nvrtc = Version::new(major, minor);
    let cublas = cublas_version().ok_or("cuBLAS does not report its version")?;
    let driver = super::symbols::driver_version()
        .map(Version)
        .ok_or("the CUDA driver does not report its version")?;
    check_libraries(nvrtc, cublas, driver)
}

/// The loaded cuBLAS's version, asked through `cublasGetProperty` (no handle needed).
fn cublas_version() -> Option<Version> {
    // `libraryPropertyType`: MAJOR_VERSION = 0, MINOR_VERSION = 1.
    type GetProperty = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
    // SAFETY: cuBLAS is loaded (the caller's symbol check found it); `cublasGetProperty` has
    // this signature in every release and writes only the integer it is given; 0 is success.
    unsafe {
        let get = cudarc::cublas::sys::culib()
            .get::<GetProperty>(b"cublasGetProperty")
            .ok()?;
        let (mut major, mut minor) = (0, 0);
        (get(0, &mut major) == 0 && get(1, &mut minor) == 0).then(|| Version::new(major, minor))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn found(dir: &Path, version: Option<i32>) -> HeaderDir {
        HeaderDir {
            dir: dir.to_path_buf(),
            version: version.map(Version),
        }
    }

    #[test]
    fn reads_the_release_of_a_header_folder() {
        let text = "#define CUDART_API_PER_THREAD_DEFAULT_STREAM\n#define CUDART_VERSION  12090\n";
        assert_eq!(defined_number(text, "CUDART_VERSION"), Some(12090));
        assert_eq!(defined_number(text, "CUDA_VERSION"), None);
        let scratch = tokenscale_scratch::Scratch::in_temp_dir("cuda-headers");
        std::fs::write(
            scratch.path().join("cuda.h"),
            "#define CUDA_VERSION 13000\n",
        )
        .unwrap();
        assert_eq!(header_version(scratch.path()), Some(Version(13000)));
        assert_eq!(Version(12090).to_string(), "12.9");
        assert_eq!(Version::new(13, 0), Version(13000));
    }

    #[test]
    fn nvrtc_takes_the_headers_of_its_own_release_and_their_cccl() {
        let scratch = tokenscale_scratch::Scratch::in_temp_dir("cuda-cccl");
        let (cu12, cu13) = (scratch.path().join("cu12"), scratch.path().join("cu13"));
        std::fs::create_dir_all(cu13.join("cccl/nv")).unwrap();
        std::fs::write(cu13.join("cccl/nv/target"), "").unwrap();
        let both = [found(&cu12, Some(12090)), found(&cu13, Some(13000))];
        assert_eq!(
            headers_for(Version(12090), &both).unwrap(),
            vec![cu12.clone()]
        );
        assert_eq!(
            headers_for(Version(13000), &both).unwrap(),
            vec![cu13.clone(), cu13.join("cccl")]
        );
        // A minor release apart is the same release for headers.
        assert_eq!(
            headers_for(Version(12040), &both).unwrap(),
            vec![cu12.clone()]
        );
    }

    #[test]
    fn nvrtc_without_headers_of_its_release_names_both() {
        let only12 = [
            found(Path::new("/w/cu12/include"), Some(12090)),
            found(Path::new("/x/include"), None),
        ];
        let err = headers_for(Version(13000), &only12).unwrap_err();
        assert!(
            err.contains("NVRTC 13.0 needs the CUDA 13 headers"),
            "{err}"
        );
        assert!(err.contains("CUDA 12.9 in /w/cu12/include"), "{err}");
        assert!(err.contains("an unknown release in /x/include"), "{err}");
        let none = headers_for(Version(12090), &[]).unwrap_err();
        assert!(none.contains("headers found: none"), "{none}");
    }

    #[test]
    fn cublas_and_the_driver_must_match_nvrtc() {
        assert!(check_libraries(Version(13000), Version(13010), Version(13000)).is_ok());
        assert!(check_libraries(Version(12090), Version(12090), Version(13000)).is_ok());
        let mixed = check_libraries(Version(13000), Version(12090), Version(13000)).unwrap_err();
        assert!(mixed.contains("NVRTC 13.0 and cuBLAS 12.9"), "{mixed}");
        let old = check_libraries(Version(13000), Version(13000), Version(12040)).unwrap_err();
        assert!(old.contains("runs CUDA 12.4 at most"), "{old}");
    }
}
