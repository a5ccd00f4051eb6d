//! Glue between the CRD and the scaling loop: the spec as a `PolicySpec`, and a model's loop
//! continued from its status.

use crate::autoscaler::{Clocks, PolicySpec, Slo, restore};
use crate::crd::{ModelDeploymentSpec, ModelDeploymentStatus};
use crate::scaling::ScalingLoop;

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

/// The scaling loop of a model this process has not seen yet: continued from what the last
/// leader wrote into `status` (its autoscaler snapshot, SLO record and removal marks), else
/// fresh.
pub fn restored_loop(
    spec: PolicySpec,
    status: Option<&ModelDeploymentStatus>,
    clocks: Clocks,
) -> ScalingLoop {
    let Some(status) = status else {
        return ScalingLoop::new(spec);
    };
    let policy = status
        .autoscaler
        .as_ref()
        .map(|snapshot| restore(snapshot, clocks));
    let slo = status
        .slo
        .as_ref()
        .map(|slo| slo.history.clone().repaired())
        .unwrap_or_default();
    // The measured starts; a status from before they were kept has the expected one only.
    let starts: Vec<f64> = if status.cold_starts.is_empty() {
        status.cold_start.iter().map(|d| d.as_secs_f64()).collect()
    } else {
        status.cold_starts.iter().map(|d| d.as_secs_f64()).collect()
    };
    ScalingLoop::resumed(spec, policy, slo, status.marked_for_removal.clone())
        .with_cold_starts(starts)
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

    #[test]
    fn a_new_leader_starts_from_the_cold_start_in_status() {
        let spec = PolicySpec::new(
            0,
            3,
            crate::autoscaler::Slo {
                ttft_p95_s: 0.5,
                tpot_p95_s: 0.05,
            },
        );
        let status = ModelDeploymentStatus {
            cold_start: Some("80s".parse().expect("a duration")),
            ..ModelDeploymentStatus::default()
        };
        let clocks = Clocks::from_unix_s(0.0, 1_767_225_600.0);
        let resumed = restored_loop(spec, Some(&status), clocks);
        assert_eq!(resumed.expected_cold_start_s(), Some(80.0));
    }
}
