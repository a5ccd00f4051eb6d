//! SGLang (`python3 -m sglang.launch_server`, the `lmsysorg/sglang` image), as its docs deploy
//! it: `--model-path`, tensor parallelism (`--tp-size`) over the replica's GPUs, metrics
//! turned on (`--enable-metrics`: without it `/metrics` is empty) and a memory-backed
//! `/dev/shm` (its docs run it with `--shm-size 32g`: the scheduler, tokenizer and detokenizer
//! processes share tensors there).

use super::{Args, EngineProcess, ModelLocation, TORCH_CACHES};
use crate::ModelDeployment;
use crate::children::served_name;

/// SGLang's JIT cache root (its torch.compile and DeepGEMM kernels), Triton's and Inductor's
/// (which SGLang's docs name for shipping the compile cache), and FlashInfer's JIT kernels.
const CACHE_ENV: [(&str, &str); 4] = [
    ("SGLANG_JIT_CACHE_ROOT", "sglang"),
    TORCH_CACHES[0],
    TORCH_CACHES[1],
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
];

pub(super) fn render(md: &ModelDeployment, location: &ModelLocation) -> EngineProcess {
    let engine = &md.spec.engine;
    let mut args = Args::new([]);
    match location {
        ModelLocation::Path(path) | ModelLocation::Alias(path) => {
            args.flag("--model-path", path);
        }
        ModelLocation::Hub { repo, revision, .. } => {
            args.flag("--model-path", repo)
                .optional("--revision", revision.as_ref());
        }
    }
    args.listen()
        .flag("--served-model-name", served_name(md))
        .flag("--tp-size", engine.gpus_per_replica().max(1))
        .switch("--enable-metrics")
        // Cached prompt tokens in `usage.prompt_tokens_details`, for the gateway's limits.
        .switch("--enable-cache-report")
        .optional("--max-running-requests", engine.max_num_seqs)
        .optional("--context-length", engine.max_model_len)
        .optional("--chunked-prefill-size", engine.max_batch_tokens)
        .optional("--mem-fraction-static", engine.kv_cache_fraction);
    EngineProcess {
        command: vec!["python3".into(), "-m".into(), "sglang.launch_server".into()],
        args: args.into_vec(),
        health_path: "/health",
        metrics_path: "/metrics",
        shared_memory: Some("8Gi"),
        drains_on_sigterm: false,
        startup_failures: 180,
        cache_env: &CACHE_ENV,
    }
}
