//! Topology spread of a model's replicas over nodes and zones, soft so it never blocks a
//! scale-up, and counted per ReplicaSet so a rollout's old and new pods spread apart.

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::selector_labels;
use crate::ModelDeployment;

/// Node label the replicas spread over first: one node's loss takes as few as possible.
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
/// Then zones: a zone's loss too.
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";
/// The label each ReplicaSet puts on its pods.
const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// One soft constraint per topology key. `ScheduleAnyway`: a replica that cannot be placed
/// evenly (one GPU node left, a zone without GPUs) is still placed, only scored lower: a
/// spread that could leave a scale-up Pending would cost the SLO it exists to protect.
/// `matchLabelKeys: [pod-template-hash]` counts only the pods of the new pod's own
/// ReplicaSet (beta and on by default from Kubernetes 1.27): during a rollout the old
/// version's pods, on their way out, neither skew the new ones nor are counted with them.
pub fn engine_topology_spread(md: &ModelDeployment) -> Vec<TopologySpreadConstraint> {
    [HOSTNAME_KEY, ZONE_KEY]
        .into_iter()
        .map(|key| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(selector_labels(md)),
                match_expressions: None,
            }),
            match_label_keys: Some(vec![POD_TEMPLATE_HASH.into()]),
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::test_support::{CUDA_SPEC, md};

    #[test]
    fn replicas_spread_softly_over_nodes_then_zones_per_replica_set() {
        let constraints = engine_topology_spread(&md(CUDA_SPEC));
        let keys: Vec<&str> = constraints
            .iter()
            .map(|c| c.topology_key.as_str())
            .collect();
        assert_eq!(keys, [HOSTNAME_KEY, ZONE_KEY]);
        for c in &constraints {
            assert_eq!(
                (c.max_skew, c.when_unsatisfiable.as_str()),
                (1, "ScheduleAnyway")
            );
            assert_eq!(
                c.match_label_keys,
                Some(vec!["pod-template-hash".to_string()])
            );
            let selected = c
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone());
            assert_eq!(selected, Some(selector_labels(&md(CUDA_SPEC))));
        }
    }
}
