//! vLLM (`vllm serve`, the `vllm/vllm-openai` image), as its Kubernetes guide deploys it:
//! the model as the positional argument, the port and served name, tensor parallelism over
//! the replica's GPUs with a memory-backed `/dev/shm` for NCCL, `/health` and `/metrics` on
//! the API port. It downloads Hub repositories into `$HF_HOME` (under the cache volume).

use super::{Args, EngineProcess, ModelLocation, TORCH_CACHES};
use crate::ModelDeployment;
use crate::children::served_name;

/// vLLM's own cache (`torch_compile_cache`: the compiled graphs, keyed by model, config and
/// versions), Triton's and Inductor's, and FlashInfer's JIT kernels (under its workspace base).
const CACHE_ENV: [(&str, &str); 4] = [
    ("VLLM_CACHE_ROOT", "vllm"),
    TORCH_CACHES[0],
    TORCH_CACHES[1],
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
];

pub(super) fn render(md: &ModelDeployment, location: &ModelLocation) -> EngineProcess {
    let engine = &md.spec.engine;
    let gpus = engine.gpus_per_replica().max(1);
    let mut args = Args::new([]);
    match location {
        ModelLocation::Path(path) | ModelLocation::Alias(path) => args.0.push(path.clone()),
        ModelLocation::Hub { repo, revision, .. } => {
            args.0.push(repo.clone());
            args.optional("--revision", revision.as_ref());
        }
    }
    args.listen()
        .flag("--served-model-name", served_name(md))
        .flag("--tensor-parallel-size", gpus)
        // Cached prompt tokens in `usage.prompt_tokens_details` (off by default): the
        // gateway's limits bill prompt tokens less cached ones.
        .switch("--enable-prompt-tokens-details")
        .optional("--max-num-seqs", engine.max_num_seqs)
        .optional("--max-model-len", engine.max_model_len)
        .optional("--max-num-batched-tokens", engine.max_batch_tokens)
        .optional("--gpu-memory-utilization", engine.kv_cache_fraction);
    EngineProcess {
        command: vec!["vllm".into(), "serve".into()],
        args: args.into_vec(),
        health_path: "/health",
        metrics_path: "/metrics",
        // One process per GPU exchanging activations through NCCL's shared memory.
        shared_memory: (gpus > 1).then_some("8Gi"),
        drains_on_sigterm: false,
        // Downloading and compiling a large model (CUDA graphs, torch.compile) can take long.
        startup_failures: 180,
        cache_env: &CACHE_ENV,
    }
}
