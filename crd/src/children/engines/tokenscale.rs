//! tokenscale's own engine: `tokenscale-engine serve`, which drains its streams itself on
//! SIGTERM and answers `/health` 503 while loading or draining.

use super::{Args, EngineProcess};
use crate::children::deployment::{PRE_STOP_SLEEP_S, model_argument};
use crate::children::served_name;
use crate::{Backend, ModelDeployment, ModelSource};

/// `tokenscale-engine serve` arguments for `md` (before `engine.args`): the basic flags, the
/// served name and drain time (so the engine's own names and grace agree with the pod's),
/// the SLO's TPOT as the engine's own target (each replica runs only the batch its measured
/// step time allows within it; the rest wait and reach the autoscaler as demand), then
/// tuning.
pub fn engine_args(md: &ModelDeployment, source: &ModelSource) -> Vec<String> {
    let engine = &md.spec.engine;
    let mut args = Args::new(["serve"]);
    args.flag("--model", model_argument(source))
        .listen()
        .flag("--backend", engine.backend.as_flag())
        .flag("--served-model-name", served_name(md))
        .flag("--drain-timeout", engine.drain_timeout.get().as_secs_f64())
        // Serves on while the pod's endpoint removal spreads, then drains (no pre-stop hook).
        .flag("--shutdown-delay", PRE_STOP_SLEEP_S)
        .flag(
            "--tpot-target",
            format!("{}ms", md.spec.slo.tpot_p95.get().as_secs_f64() * 1e3),
        )
        .optional("--max-num-seqs", engine.max_num_seqs)
        .optional("--max-batch-tokens", engine.max_batch_tokens)
        .optional("--max-model-len", engine.max_model_len)
        // The KV-cache share of device memory is the CUDA engine's `--gpu-memory-utilization`;
        // CPU and sim engines size their cache in tokens and have no such flag.
        .optional(
            "--gpu-memory-utilization",
            engine
                .kv_cache_fraction
                .filter(|_| engine.backend == Backend::Cuda),
        );
    for adapter in &md.spec.model.adapters {
        args.flag("--lora", adapter.lora_flag());
    }
    args.into_vec()
}

pub(super) fn render(md: &ModelDeployment, source: &ModelSource) -> EngineProcess {
    EngineProcess {
        command: vec!["tokenscale-engine".into()],
        args: engine_args(md, source),
        health_path: "/health",
        metrics_path: "/metrics",
        shared_memory: None,
        drains_on_sigterm: true,
        // Loading (and fetching) a model can take minutes: up to 15 before the pod is failed.
        startup_failures: 90,
        // No compile step: the weights are all it caches (`HF_HOME`, `XDG_CACHE_HOME`).
        cache_env: &[],
    }
}
