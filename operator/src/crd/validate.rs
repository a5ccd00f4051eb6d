//! Semantic checks of a spec: the CEL rules of the CRD, mirrored in Rust, plus the rules a
//! schema cannot express (positive SLOs, window ordering). The reconciler refuses a spec that
//! fails them with a clear condition instead of acting on it.

use super::source::ModelSource;
use super::spec::{Backend, ModelDeploymentSpec};

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
        if let Err(e) = ModelSource::parse(&self.model.source) {
            push("model.source", e.to_string());
        }
        let engine = &self.engine;
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
