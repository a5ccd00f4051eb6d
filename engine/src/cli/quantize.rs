//! `tokenscale-engine quantize IN OUT --type Q4_K_M`: requantises a GGUF model with
//! llama.cpp's block layouts and per-tensor mixes, and prints what each tensor became.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use crate::quant::mix::FileType;

/// Arguments of `quantize`.
#[derive(Debug, clap::Args)]
pub struct QuantizeArgs {
    /// The GGUF model to read (any type the engine reads: F32, F16, BF16, Q8_0, Q5_*, Q4_*,
    /// the K-quants).
    pub input: PathBuf,
    /// Where to write the new model (written to OUT.gguf.part, then renamed).
    pub output: PathBuf,
    /// The mix: Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S, Q6_K, Q3_K_S/M/L, Q2_K, Q8_0, Q5_0, Q5_1,
    /// Q4_0, Q4_1, F16, BF16, F32.
    #[arg(long = "type", value_parser = clap::value_parser!(FileTypeArg))]
    pub ftype: FileTypeArg,
}

/// A `--type` value.
#[derive(Debug, Clone, Copy)]
pub struct FileTypeArg(pub FileType);

impl std::str::FromStr for FileTypeArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(Self)
    }
}

/// Runs `quantize`: a summary of the types written goes to stderr.
pub fn run(args: QuantizeArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let report = crate::model::requantize_file(&args.input, &args.output, args.ftype.0)
        .with_context(|| format!("quantizing {} to {}", args.input.display(), args.ftype.0))?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, ty) in &report.tensors {
        *counts.entry(ty.to_string()).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(t, n)| format!("{n} {t}")).collect();
    eprintln!(
        "{}: {} tensors ({}), {:.1} MiB -> {:.1} MiB in {:.1} s",
        args.output.display(),
        report.tensors.len(),
        counts.join(", "),
        report.bytes_in as f64 / 1048576.0,
        report.bytes_out as f64 / 1048576.0,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
