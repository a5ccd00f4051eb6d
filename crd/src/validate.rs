//! Semantic checks of a spec: the CEL rules of the CRD, mirrored in Rust, plus the rules a
//! schema cannot express (positive SLOs, window ordering). The reconciler refuses a spec that
//! fails them with a clear condition instead of acting on it.

use super::source::ModelSource;
use super::spec::{Backend, EngineKind, ModelDeploymentSpec, ModelFormat};
use crate::children::engines;

/// Why `format` cannot be what `source` holds, if it cannot: a `.gguf` file is GGUF, an
/// `hf://org/repo` without a file is a safetensors checkpoint.
fn format_mismatch(source: &ModelSource, format: Option<ModelFormat>) -> Option<String> {
    let format = format?;
    let is_gguf = source.to_string().ends_with(".gguf");
    let whole_repo = matches!(source, ModelSource::HuggingFace(h) if h.file.is_none());
    match format {
        ModelFormat::Safetensors if is_gguf => {
            Some("safetensors, but the source is a .gguf file".into())
        }
        ModelFormat::Gguf if whole_repo => Some(
            "gguf, but the source is a whole Hub repository (a safetensors checkpoint); name the \
             file: hf://org/repo/FILE.gguf"
                .into(),
        ),
        _ => None,
    }
}

/// One problem with a spec, named by its field path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("spec.{field}: {message}")]
pub struct SpecError {
    /// Field path under `spec`, e.g. `replicas.min`.
    pub field: &'static str,
    /// What is wrong, in words.
    pub message: String,
}

impl ModelDeploymentSpec {
    /// Every problem with this spec; empty when it is valid.
    /// What is wrong with `model.adapters`: another engine kind, a name given twice or the
    /// model's own.
    fn adapter_problem(&self) -> Option<String> {
        let adapters = &self.model.adapters;
        if !adapters.is_empty() && self.engine.kind != EngineKind::Tokenscale {
            return Some(
                "adapters are loaded at start by the tokenscale engine only; for vLLM pass \
                 --enable-lora and --lora-modules in engine.args"
                    .into(),
            );
        }
        for (i, a) in adapters.iter().enumerate() {
            if adapters[..i].iter().any(|b| b.name == a.name) {
                return Some(format!("the name {:?} is given twice", a.name));
            }
            if self.model.served_name.as_deref() == Some(a.name.as_str()) {
                return Some(format!("{:?} is the model's own servedName", a.name));
            }
        }
        None
    }

    pub fn problems(&self) -> Vec<SpecError> {
        let mut out = Vec::new();
        let mut push = |field, message: String| out.push(SpecError { field, message });
        let r = &self.replicas;
        if r.min < 0 {
            push("replicas.min", format!("must be >= 0, got {}", r.min));
        }
        if r.max < 1 {
            push("replicas.max", format!("must be >= 1, got {}", r.max));
        }
        if r.min > r.max {
            // Mirrors the CRD's CEL rule `self.min <= self.max`.
            push(
                "replicas",
                format!(
                    "replicas.min ({}) must be less than or equal to replicas.max ({})",
                    r.min, r.max
                ),
            );
        }
        if let Some(desired) = r.desired
            && !(r.min..=r.max).contains(&desired)
        {
            // Mirrors the CRD's CEL rule, which refuses such a `kubectl scale`.
            push(
                "replicas.desired",
                format!(
                    "{desired} is outside replicas.min ({}) and replicas.max ({})",
                    r.min, r.max
                ),
            );
        }
        match ModelSource::parse(&self.model.source) {
            Err(e) => push("model.source", e.to_string()),
            Ok(source) => {
                if let Some(message) = format_mismatch(&source, self.model.format) {
                    push("model.format", message);
                }
                if let Err(e) = engines::model_location(self.engine.kind, &source) {
                    push("model.source", e);
                }
            }
        }
        if let Some(message) = self.adapter_problem() {
            push("model.adapters", message);
        }
        if let Some(secret) = &self.model.hf_token_secret
            && !super::source::is_dns_subdomain(&secret.name)
        {
            push(
                "model.hfTokenSecret.name",
                format!("{:?} is not a Secret name", secret.name),
            );
        }
        if let Some(claim) = self
            .model
            .cache
            .as_ref()
            .and_then(|c| c.claim_name.as_ref())
            && !super::source::is_dns_subdomain(claim)
        {
            push(
                "model.cache.claimName",
                format!("{claim:?} is not a PersistentVolumeClaim name"),
            );
        }
        if let Some(cache) = self.model.cache.as_ref().filter(|c| c.fills()) {
            if cache.claim_name.is_some() {
                push(
                    "model.cache.fill",
                    "fill creates and fills its own claim: leave claimName out".into(),
                );
            }
            if !self.model.source.starts_with("hf://") {
                push(
                    "model.cache.fill",
                    format!(
                        "only an hf:// source is fetched into the cache, got {:?}",
                        self.model.source
                    ),
                );
            }
            if self.engine.kind == EngineKind::Llamacpp {
                push(
                    "model.cache.fill",
                    "llama.cpp keeps its downloads in its own layout, not the Hugging Face \
                     cache the fill Job writes: use kind tokenscale, vllm or sglang"
                        .into(),
                );
            }
        }
        let engine = &self.engine;
        if engine.kind == EngineKind::Tokenscale && engine.gpus_per_replica.unwrap_or(0) > 1 {
            // Mirrors the CRD's CEL rule: N GPUs one replica cannot use would sit idle.
            push(
                "engine.gpusPerReplica",
                format!(
                    "tokenscale's engine uses one GPU per replica (no tensor parallelism yet), \
                     got {}: set 1, or engine.kind vllm or sglang to split the model over \
                     several GPUs",
                    engine.gpus_per_replica.unwrap_or(0)
                ),
            );
        }
        if engine
            .command
            .as_ref()
            .is_some_and(|c| c.first().is_none_or(|p| p.trim().is_empty()))
        {
            push(
                "engine.command",
                "names no program: give the executable first, or leave command unset".into(),
            );
        }
        if engine.kind != EngineKind::Tokenscale && engine.backend == Backend::Sim {
            push(
                "engine.backend",
                format!(
                    "sim is tokenscale's simulated engine; {} runs cuda{}",
                    engine.kind.display_name(),
                    if engine.kind == EngineKind::Llamacpp {
                        " or cpu"
                    } else {
                        ""
                    }
                ),
            );
        }
        if matches!(engine.kind, EngineKind::Vllm | EngineKind::Sglang)
            && engine.backend == Backend::Cpu
        {
            push(
                "engine.backend",
                format!(
                    "{} replicas run on cuda here; for CPU replicas use engine.kind llamacpp \
                     or tokenscale",
                    engine.kind.display_name()
                ),
            );
        }
        if engine.backend != Backend::Cuda && engine.gpus_per_replica.unwrap_or(0) != 0 {
            // Mirrors the CRD's CEL rule on `engine`.
            push(
                "engine.gpusPerReplica",
                "must be 0 or unset unless backend is cuda".into(),
            );
        }
        if engine.backend == Backend::Cuda && engine.gpus_per_replica == Some(0) {
            push(
                "engine.gpusPerReplica",
                "a cuda replica needs at least one GPU".into(),
            );
        }
        if let Some((field, message)) = crate::children::rollout::problem(&self.rollout) {
            push(field, message);
        }
        if self.slo.ttft_p95.get().is_zero() {
            push("slo.ttftP95", "must be greater than zero".into());
        }
        if self.slo.tpot_p95.get().is_zero() {
            push("slo.tpotP95", "must be greater than zero".into());
        }
        let s = &self.scaling;
        if s.period.get().is_zero() {
            push("scaling.period", "must be greater than zero".into());
        }
        if s.panic_window.get() > s.stable_window.get() {
            push(
                "scaling.panicWindow",
                format!(
                    "({}) must not be longer than stableWindow ({})",
                    s.panic_window, s.stable_window
                ),
            );
        }
        if !(0.1..=1.0).contains(&s.target_utilization) {
            push(
                "scaling.targetUtilization",
                format!("must be in [0.1, 1], got {}", s.target_utilization),
            );
        }
        if s.max_scale_up_rate < 1.0 {
            push(
                "scaling.maxScaleUpRate",
                format!("must be >= 1, got {}", s.max_scale_up_rate),
            );
        }
        if !(s.max_scale_down_rate > 0.0 && s.max_scale_down_rate <= 1.0) {
            push(
                "scaling.maxScaleDownRate",
                format!("must be in (0, 1], got {}", s.max_scale_down_rate),
            );
        }
        if s.initial_tokens_per_second_per_gpu
            .is_some_and(|v| !(v > 0.0 && v.is_finite()))
        {
            push(
                "scaling.initialTokensPerSecondPerGpu",
                "must be a positive number".into(),
            );
        }
        out
    }

    /// `Ok` when valid, else all problems joined into one message.
    pub fn validate(&self) -> Result<(), String> {
        let problems = self.problems();
        if problems.is_empty() {
            return Ok(());
        }
        Err(problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "))
    }
}
