//! `tokenscale-engine cuda-check`: compiles every CUDA kernel through NVRTC (`--compile-only`,
//! no GPU needed), or on a GPU also checks each kernel against a host reference, the whole
//! model against golden greedy tokens, and measures decode speed against the roofline.

use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::backend::cuda::compile::{self, Arch};
use crate::backend::cuda::{PrefillAttention, check, kernels, libs};

/// Arguments of `cuda-check`.
#[derive(Debug, clap::Args)]
pub struct CudaCheckArgs {
    /// Only compile every kernel to PTX through NVRTC and print each kernel's PTX size.
    #[arg(long)]
    pub compile_only: bool,
    /// Target of `--compile-only`: `compute_XY` (PTX, sizes per kernel) or `sm_XY` (CUBIN
    /// through ptxas, sizes per file). Default: compute_80.
    #[arg(long)]
    pub arch: Option<String>,
    /// A model for the end-to-end checks (golden tokens, speed): a GGUF file or a checkpoint
    /// directory.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Checkpoints (directories or GGUF files) to run on the GPU and on the CPU reference
    /// backend, comparing every step's logits.
    #[arg(long, value_delimiter = ',')]
    pub parity: Vec<PathBuf>,
    /// Golden reference JSON (prompt ids, greedy ids, top-5 logits per step) for `--model`.
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// Measure decode step time and tokens/s against the roofline.
    #[arg(long)]
    pub bench: bool,
    /// Batch sizes measured by `--bench`.
    #[arg(long, value_delimiter = ',', default_value = "1,32,128,256")]
    pub batch: Vec<usize>,
    /// Context length (tokens) of every sequence in `--bench`.
    #[arg(long, default_value_t = 512)]
    pub context: usize,
    /// Also measure a random-weight Llama of 1B shape (Llama 3.2 1B) in `--bench`.
    #[arg(long)]
    pub random_1b: bool,
    /// Prefill attention kernels `--golden` runs with, one after the other: `naive`, `mma`
    /// or `naive,mma` (the per-kernel parity table always checks both).
    #[arg(long, value_delimiter = ',', default_value = "naive")]
    pub prefill_attention: Vec<PrefillAttention>,
    /// Skip the per-kernel parity checks.
    #[arg(long)]
    pub skip_ops: bool,
    /// Only the speculative decoding case: `--model` decoded greedily with n-gram drafts and
    /// without, tokens compared, acceptance printed.
    #[arg(long)]
    pub speculative: bool,
    /// Backend of `--speculative`: `cuda`, or `cpu` (the check's plumbing without a GPU).
    #[arg(long, default_value = "cuda", value_parser = ["cuda", "cpu"])]
    pub backend: String,
}

/// Runs `cuda-check`.
pub fn run(args: CudaCheckArgs) -> anyhow::Result<()> {
    if args.compile_only {
        return compile_only(args.arch.as_deref().unwrap_or("compute_80"));
    }
    if args.speculative {
        return speculative(&args);
    }
    crate::backend::cuda::available()
        .map_err(|reason| anyhow::anyhow!("CUDA unavailable: {reason}"))?;
    if args.arch.is_some() {
        bail!(
            "--arch only applies with --compile-only (a GPU run compiles for the GPU's own architecture)"
        );
    }
    let mut failed = Vec::new();
    if !args.skip_ops {
        let rows = check::ops::run_all().context("kernel parity")?;
        println!("{}", check::ops::table(&rows));
        failed.extend(rows.iter().filter(|r| !r.pass).map(|r| r.op.clone()));
    }
    if let (Some(model), Some(golden)) = (&args.model, &args.golden) {
        for &kernel in &args.prefill_attention {
            let cases = check::golden::run(model, golden, kernel).context("golden tokens")?;
            println!("prefill attention: {kernel}");
            println!("{}", check::golden::table(&cases));
            failed.extend(
                cases
                    .iter()
                    .filter(|c| !c.pass)
                    .map(|c| format!("golden ({kernel}): {}", c.prompt)),
            );
        }
    }
    if !args.parity.is_empty() {
        let mut rows = Vec::new();
        for path in &args.parity {
            rows.push(
                check::parity::run_checkpoint(path)
                    .with_context(|| format!("parity of {}", path.display()))?,
            );
        }
        println!("{}", check::parity::table(&rows));
        failed.extend(
            rows.iter()
                .filter(|r| !r.pass)
                .map(|r| format!("parity: {}", r.name)),
        );
    }
    if args.bench {
        let mut points = Vec::new();
        if let Some(model) = &args.model {
            points.extend(check::speed::bench_file(model, &args.batch, args.context)?);
        }
        if args.random_1b {
            points.extend(check::speed::bench_random_1b(&args.batch, args.context)?);
        }
        println!("{}", check::speed::table(&points));
    }
    if !failed.is_empty() {
        bail!("{} check(s) failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}

/// The speculative decoding case alone, on the backend `--backend` names.
fn speculative(args: &CudaCheckArgs) -> anyhow::Result<()> {
    let Some(model) = &args.model else {
        bail!("--speculative needs --model");
    };
    let cpu = args.backend == "cpu";
    if !cpu {
        crate::backend::cuda::available()
            .map_err(|reason| anyhow::anyhow!("CUDA unavailable: {reason}"))?;
    }
    let cases = check::speculative::run(&model.to_string_lossy(), cpu)?;
    println!(
        "speculative decoding (--speculative ngram, greedy) on {}",
        args.backend
    );
    println!("{}", check::speculative::table(&cases));
    let failed: Vec<String> = cases
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("speculative: {} x{}", c.task, c.streams))
        .collect();
    if !failed.is_empty() {
        bail!("{} check(s) failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}

/// Compiles every kernel file for `arch` and prints one line per kernel with its PTX size.
fn compile_only(arch: &str) -> anyhow::Result<()> {
    let arch = Arch::parse(arch)?;
    libs::probe_nvrtc().map_err(|reason| anyhow::anyhow!(reason))?;
    let (major, minor) = compile::nvrtc_version()?;
    let includes = compile::include_dirs((major, minor))?;
    println!("NVRTC {major}.{minor}, target {arch}, headers from {includes:?}");
    println!("{:<24} {:<22} {:>10}", "kernel", "file", "ptx_bytes");
    let mut total = 0;
    for source in kernels::SOURCES {
        let image = compile::compile(source, arch, &includes)?;
        if let Arch::Cubin { .. } = arch {
            // A CUBIN went through ptxas too (registers, shared memory): one line per file.
            println!(
                "{:<24} {:<22} {:>10}",
                source.kernels.join(","),
                source.file,
                image.len()
            );
            total += source.kernels.len();
            continue;
        }
        let ptx = String::from_utf8_lossy(&image);
        let entries = kernels::ptx_entries(&ptx);
        for kernel in source.kernels {
            let Some((_, body)) = entries.iter().find(|(name, _)| name == kernel) else {
                bail!("{}: kernel {kernel} is missing from the PTX", source.file);
            };
            println!("{kernel:<24} {:<22} {:>10}", source.file, body.len());
            total += 1;
        }
    }
    println!("{total} kernels compiled for {arch}");
    Ok(())
}
