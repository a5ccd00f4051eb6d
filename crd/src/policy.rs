//! The spec as the scaling policy's input: what the operator, `tokenscale up` and the sim
//! plan each model with.

use tokenscale_scaling::autoscaler::{PolicySpec, Slo};

use crate::ModelDeploymentSpec;

/// The policy's input from a (validated) spec.
pub fn policy_spec(spec: &ModelDeploymentSpec) -> PolicySpec {
    let slo = Slo {
        ttft_p95_s: spec.slo.ttft_p95.as_secs_f64(),
        tpot_p95_s: spec.slo.tpot_p95.as_secs_f64(),
    };
    let bound = |v: i32| u32::try_from(v).unwrap_or(0);
    let mut p = PolicySpec::new(bound(spec.replicas.min), bound(spec.replicas.max), slo);
    p.scale_to_zero_after = spec.replicas.scale_to_zero_after.as_ref().map(|d| d.get());
    p.target_utilization = spec.scaling.target_utilization;
    p.stable_window = spec.scaling.stable_window.get();
    p.panic_window = spec.scaling.panic_window.get();
    p.scale_down_stabilization = spec.scaling.scale_down_stabilization.get();
    p.scale_up_max_factor = spec.scaling.max_scale_up_rate;
    p.scale_down_max_fraction = spec.scaling.max_scale_down_rate;
    p.initial_tokens_per_s_per_gpu = spec.scaling.initial_tokens_per_second_per_gpu;
    // On CPU (no GPUs) capacity is per replica: count the replica as one "GPU".
    p.gpus_per_replica = spec.engine.gpus_per_replica().max(1);
    p.period = spec.scaling.period.get();
    if let Some(hint) = &spec.scaling.startup_time {
        p.startup_time = hint.get();
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_maps_to_policy_numbers() {
        let spec: ModelDeploymentSpec = serde_json::from_value(serde_json::json!({
            "model": {"source": "smollm2-135m-instruct"},
            "engine": {"backend": "cpu"},
            "replicas": {"min": 0, "max": 3, "scaleToZeroAfter": "5m"},
            "slo": {"ttftP95": "500ms", "tpotP95": "50ms"},
            "scaling": {"initialTokensPerSecondPerGpu": 40.0}
        }))
        .expect("valid spec");
        let p = policy_spec(&spec);
        assert_eq!(
            (p.min_replicas, p.max_replicas, p.gpus_per_replica),
            (0, 3, 1)
        );
        assert_eq!(
            p.slo,
            Slo {
                ttft_p95_s: 0.5,
                tpot_p95_s: 0.05
            }
        );
        assert_eq!(
            p.scale_to_zero_after,
            Some(std::time::Duration::from_secs(300))
        );
        assert_eq!(p.initial_tokens_per_s_per_gpu, Some(40.0));
        assert!(p.validate().is_ok());
    }
}
