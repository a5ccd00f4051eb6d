//! Glue between the CRD and the scaling loop: the spec as a `PolicySpec`, and a model's loop
//! continued from its status.

use crate::autoscaler::{Clocks, PolicySpec, restore};
use crate::crd::ModelDeploymentStatus;
use crate::scaling::ScalingLoop;
/// The spec as a `PolicySpec` (in the CRD crate, which `tokenscale up` shares).
pub use tokenscale_crd::policy::policy_spec;

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
