//! The engine `PodDisruptionBudget`: voluntary evictions take one replica at a time.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{ChildError, child_metadata, selector_labels};
use crate::ModelDeployment;

/// `maxUnavailable` rather than `minAvailable`: a one-replica model must not block node
/// drains forever. The bound is the rollout's (1 by default), so a drain takes no more
/// replicas at once than a rollout does ([`super::rollout::disruption_bound`]).
pub fn engine_pdb(md: &ModelDeployment) -> Result<PodDisruptionBudget, ChildError> {
    Ok(PodDisruptionBudget {
        metadata: child_metadata(md)?,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(super::rollout::disruption_bound(&md.spec.rollout)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(md)),
                ..Default::default()
            }),
            // A pod that never became ready holds no streams: let evictions take it.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::test_support::{CUDA_SPEC, md};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn one_at_a_time_over_the_engine_pods() {
        let pdb = engine_pdb(&md(CUDA_SPEC)).expect("builds");
        let spec = pdb.spec.expect("spec");
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        let labels = spec
            .selector
            .and_then(|s| s.match_labels)
            .unwrap_or_default();
        assert_eq!(labels["tokenscale.dev/model-deployment"], "llama");
        assert_eq!(pdb.metadata.name.as_deref(), Some("llama-engine"));
    }
}
