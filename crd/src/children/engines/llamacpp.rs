//! llama.cpp's `llama-server` (the `ghcr.io/ggml-org/llama.cpp:server[-cuda]` images, whose
//! entrypoint is `/app/llama-server`): a GGUF by path (`-m`) or from the Hub (`--hf-repo`,
//! `--hf-file`, cached under `$XDG_CACHE_HOME/llama.cpp`), `--alias` as the served name,
//! `--metrics` (off by default), one slot per concurrent sequence (`--parallel`) and every
//! layer on the GPUs when it has any (split across them by layer, llama.cpp's default).

use super::{Args, EngineProcess, ModelLocation};
use crate::ModelDeployment;
use crate::children::served_name;

pub(super) fn render(md: &ModelDeployment, location: &ModelLocation) -> EngineProcess {
    let engine = &md.spec.engine;
    let mut args = Args::new([]);
    match location {
        ModelLocation::Path(path) | ModelLocation::Alias(path) => {
            args.flag("--model", path);
        }
        ModelLocation::Hub { repo, file, .. } => {
            args.flag("--hf-repo", repo)
                .optional("--hf-file", file.as_ref());
        }
    }
    // llama.cpp divides its context among the slots: each sequence gets ctx-size / parallel.
    let context = engine
        .max_model_len
        .map(|len| len.saturating_mul(engine.max_num_seqs.unwrap_or(1)));
    args.listen()
        .flag("--alias", served_name(md))
        .switch("--metrics")
        .optional("--parallel", engine.max_num_seqs)
        .optional("--ctx-size", context)
        .optional("--batch-size", engine.max_batch_tokens);
    if engine.gpus_per_replica() > 0 {
        args.flag("--n-gpu-layers", 999);
    }
    EngineProcess {
        command: vec!["/app/llama-server".into()],
        args: args.into_vec(),
        health_path: "/health",
        metrics_path: "/metrics",
        shared_memory: None,
        drains_on_sigterm: false,
        startup_failures: 90,
        // No compile step: the weights are all it caches (`HF_HOME`, `XDG_CACHE_HOME`).
        cache_env: &[],
    }
}
