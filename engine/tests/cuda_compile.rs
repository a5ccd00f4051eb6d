//! CUDA without a GPU: every kernel compiles through NVRTC to PTX for compute_80 and compute_90
//! and through ptxas to an sm_90 CUBIN, once per CUDA release, each NVRTC with the headers of its
//! own release (the PyPI wheels `scripts/setup` installs: CUDA 12 into `.cache/tools/python`,
//! CUDA 13 into `.cache/tools/python-cu13`); NVRTC offered only another release's headers fails
//! with a clear error; and where no NVIDIA driver is installed, the GPU commands fail with a
//! one-line reason instead of a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tokenscale_engine::backend::cuda::{kernels::SOURCES, libs};

const BIN: &str = env!("CARGO_BIN_EXE_tokenscale-engine");

/// One CUDA release's NVRTC library folder and header folder, from the wheels.
struct Release {
    /// What NVRTC reports, as the engine prints it (`NVRTC 12.`).
    nvrtc: &'static str,
    lib: PathBuf,
    include: PathBuf,
}

/// The CUDA 12 and CUDA 13 wheels `scripts/setup` installs; a missing one fails the test.
fn releases() -> [Release; 2] {
    let tools = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/tools");
    let cu12 = tools.join("python/nvidia");
    let cu13 = tools.join("python-cu13/nvidia/cu13");
    let found = [
        Release {
            nvrtc: "NVRTC 12.",
            lib: cu12.join("cuda_nvrtc/lib"),
            include: cu12.join("cuda_runtime/include"),
        },
        Release {
            nvrtc: "NVRTC 13.",
            lib: cu13.join("lib"),
            include: cu13.join("include"),
        },
    ];
    for (release, soname) in found.iter().zip(["libnvrtc.so.12", "libnvrtc.so.13"]) {
        assert!(
            release.lib.join(soname).is_file() && release.include.join("cuda_bf16.h").is_file(),
            "{soname} or its cuda_bf16.h not found ({}, {}): run scripts/setup (it installs \
             nvidia-cuda-nvrtc-cu12 and nvidia-cuda-runtime-cu12, and the CUDA 13 \
             nvidia-cuda-nvrtc, nvidia-cuda-runtime and nvidia-cuda-cccl)",
            release.lib.display(),
            release.include.display()
        );
    }
    found
}

/// Runs the engine with NVRTC from `lib` and the headers in `include` (a search path); killed
/// after 120 s (a command that should have failed at once must not hang the suite).
fn engine_with(lib: &Path, include: &str, args: &[&str]) -> Output {
    let cache = tokenscale_scratch::scratch!("cuda-kernel-cache");
    let mut child = Command::new(BIN)
        .args(args)
        .env(libs::LIB_DIRS_ENV, lib)
        .env("TOKENSCALE_CUDA_INCLUDE_DIRS", include)
        .env("TOKENSCALE_KERNEL_CACHE", cache.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the engine binary starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait on the engine").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
        .wait_with_output()
        .expect("collect the engine's output")
}

/// Runs the engine with `release`'s NVRTC and headers.
fn engine_on(release: &Release, args: &[&str]) -> Output {
    engine_with(&release.lib, &release.include.to_string_lossy(), args)
}

/// Runs the engine with the CUDA 12 wheels.
fn engine(args: &[&str]) -> Output {
    engine_on(&releases()[0], args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_kernel_compiles_to_ptx_for_compute_80_and_compute_90() {
    for release in &releases() {
        for arch in ["compute_80", "compute_90"] {
            let out = engine_on(release, &["cuda-check", "--compile-only", "--arch", arch]);
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert!(
                out.status.success(),
                "{} {arch}: exit {:?}\n{stdout}\n{stderr}",
                release.nvrtc,
                out.status
            );
            assert!(stdout.starts_with(release.nvrtc), "{stdout}");
            let mut count = 0;
            for source in SOURCES {
                for kernel in source.kernels {
                    let line = stdout
                        .lines()
                        .find(|l| l.split_whitespace().next() == Some(kernel))
                        .unwrap_or_else(|| panic!("{arch}: no line for {kernel}\n{stdout}"));
                    let bytes: usize = line
                        .split_whitespace()
                        .last()
                        .and_then(|b| b.parse().ok())
                        .unwrap_or(0);
                    assert!(bytes > 100, "{arch}: {kernel} has {bytes} bytes of PTX");
                    count += 1;
                }
            }
            assert!(
                stdout.contains(&format!("{count} kernels compiled for {arch}")),
                "{stdout}"
            );
        }
    }
}

#[test]
fn every_kernel_assembles_to_an_sm_90_cubin() {
    // ptxas rejects what PTX alone does not: too much shared memory, impossible launch bounds.
    for release in &releases() {
        let out = engine_on(
            release,
            &["cuda-check", "--compile-only", "--arch", "sm_90"],
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        assert!(stdout.starts_with(release.nvrtc), "{stdout}");
        let total: usize = SOURCES.iter().map(|s| s.kernels.len()).sum();
        assert!(
            stdout.contains(&format!("{total} kernels compiled for sm_90")),
            "{stdout}"
        );
    }
}

#[test]
fn nvrtc_takes_the_headers_of_its_own_release_when_both_are_offered() {
    let [cu12, cu13] = releases();
    let both = std::env::join_paths([&cu12.include, &cu13.include]).expect("a search path");
    for (release, other) in [(&cu12, &cu13), (&cu13, &cu12)] {
        let out = engine_with(
            &release.lib,
            &both.to_string_lossy(),
            &["cuda-check", "--compile-only", "--arch", "compute_90"],
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        let first = stdout.lines().next().unwrap_or_default();
        assert!(first.starts_with(release.nvrtc), "{first}");
        let (own, foreign) = (
            release.include.to_string_lossy(),
            other.include.to_string_lossy(),
        );
        assert!(first.contains(own.as_ref()), "{first}");
        assert!(!first.contains(foreign.as_ref()), "{first}");
    }
}

#[test]
fn nvrtc_with_only_another_release_headers_is_a_clear_error() {
    let [cu12, cu13] = releases();
    for (release, other, wanted) in [(&cu13, &cu12, "CUDA 13"), (&cu12, &cu13, "CUDA 12")] {
        let out = engine_with(
            &release.lib,
            &other.include.to_string_lossy(),
            &["cuda-check", "--compile-only", "--arch", "compute_90"],
        );
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success(),
            "{} compiled with the other release's headers",
            release.nvrtc
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(
            stderr.contains(&format!("needs the {wanted} headers")),
            "{stderr}"
        );
        assert!(
            stderr.contains(other.include.to_string_lossy().as_ref()),
            "{stderr}"
        );
    }
}

#[test]
fn a_bad_architecture_is_a_clear_error() {
    let out = engine(&["cuda-check", "--compile-only", "--arch", "compute_9"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("bad --arch"),
        "{}",
        text(&out.stderr)
    );
}

/// Exit status and stderr of a GPU command where no driver is installed: non-zero, one line
/// naming the reason, no panic. (Where a driver is present the command may run; not checked.)
fn assert_fails_cleanly_without_driver(args: &[&str]) {
    if libs::probe_driver().is_ok() {
        eprintln!("an NVIDIA driver is present: {args:?} may run, not checked here");
        return;
    }
    let out = engine(args);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded without a driver");
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    // Progress logs may precede it; the failure itself is one line naming the reason.
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(
        errors.len(),
        1,
        "{args:?} printed {} error lines:\n{stderr}",
        errors.len()
    );
    assert!(errors[0].contains("no CUDA driver"), "{args:?}: {stderr}");
}

#[test]
fn gpu_checks_fail_with_one_line_without_a_driver() {
    assert_fails_cleanly_without_driver(&["cuda-check"]);
}

#[test]
fn backend_cuda_fails_with_one_line_without_a_driver() {
    // `serve` and `generate` take `--backend cuda` once their owners wire it; each one that
    // advertises the flag is held to the same contract as `cuda-check`.
    let cases: [&[&str]; 2] = [
        &[
            "generate",
            "--backend",
            "cuda",
            "--model",
            "smollm2-135m",
            "--prompt",
            "hi",
            "--max-tokens",
            "1",
        ],
        &["serve", "--backend", "cuda", "--model", "smollm2-135m"],
    ];
    for args in cases {
        let help = engine(&[args[0], "--help"]);
        if text(&help.stdout).contains("--backend") {
            assert_fails_cleanly_without_driver(args);
        } else {
            eprintln!("{} has no --backend flag yet: not checked", args[0]);
        }
    }
}
