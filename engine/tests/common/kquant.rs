//! SmolLM2 requantised by the engine's own quantiser (`model::requantize_file`, what
//! `tokenscale-engine quantize` runs): once per test binary and file type, into a folder of
//! cargo's test temp dir kept for the process (`tokenscale_scratch`). Never a cache: the
//! quantiser under test makes every file the tests read; folders of processes that have ended
//! are removed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use tokenscale_engine::backend::cpu::{CpuBackend, Precision};
use tokenscale_engine::model::Model;
use tokenscale_engine::quant::mix::FileType;

/// The requantised file for `ftype` (made on first use).
pub fn path(ftype: FileType) -> PathBuf {
    static PATHS: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let paths = PATHS.get_or_init(Default::default);
    // One quantisation at a time: they use every core already.
    let mut paths = paths.lock().expect("no test panicked while quantising");
    paths
        .entry(ftype.to_string())
        .or_insert_with(|| {
            let dir = folder();
            let out = dir.join(format!("smollm2-135m-{ftype}.gguf"));
            let source = tokenscale_engine::fetch::ensure_model("smollm2-135m")
                .expect("the test model is cached or can be fetched");
            let start = std::time::Instant::now();
            let report = tokenscale_engine::model::requantize_file(&source, &out, ftype)
                .expect("the quantiser writes the file");
            eprintln!(
                "quantised SmolLM2 to {ftype} in {:.1} s ({} → {} bytes)",
                start.elapsed().as_secs_f64(),
                report.bytes_in,
                report.bytes_out
            );
            out
        })
        .clone()
}

/// The requantised model, loaded once per test binary and file type.
pub fn model(ftype: FileType) -> Arc<Model> {
    static MODELS: OnceLock<Mutex<HashMap<String, Arc<Model>>>> = OnceLock::new();
    let file = path(ftype);
    let models = MODELS.get_or_init(Default::default);
    let mut models = models.lock().expect("no test panicked while loading");
    models
        .entry(ftype.to_string())
        .or_insert_with(|| {
            let (_, model) =
                tokenscale_engine::model::load(&file).expect("the quantised model loads");
            Arc::new(model)
        })
        .clone()
}

/// A backend over the `ftype` model with `num_blocks` blocks of `block_size` slots.
pub fn backend(
    ftype: FileType,
    precision: Precision,
    num_blocks: usize,
    block_size: usize,
) -> CpuBackend {
    super::backend_for(model(ftype), precision, num_blocks, block_size)
}

/// This process's folder for the requantised files, kept for its statics (the helper removes it
/// once the process has ended, and never another process's or test's folder).
fn folder() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| tokenscale_scratch::scratch!("kquant").keep())
        .clone()
}
