//! The engine `NetworkPolicy`: ingress to `md`'s engine pods only from the peers the operator
//! was given (the gateway, the operator's scraper, any extra scrapers), on the engine port. One
//! per ModelDeployment, so every namespace the operator manages is covered, whoever creates
//! deployments there. Egress is left open: engines may download model weights.

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{ChildError, ENGINE_PORT, child_metadata, selector_labels};
use crate::ModelDeployment;

/// The NetworkPolicy admitting only `peers` to `md`'s engine pods.
pub fn engine_network_policy(
    md: &ModelDeployment,
    peers: &[NetworkPolicyPeer],
) -> Result<NetworkPolicy, ChildError> {
    Ok(NetworkPolicy {
        metadata: child_metadata(md)?,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector_labels(md)),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(peers.to_vec()),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(ENGINE_PORT)),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
            }]),
            egress: None,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::test_support::{CUDA_SPEC, md};

    #[test]
    fn only_the_given_peers_reach_the_engine_port_of_this_deployments_pods() {
        let gateway: NetworkPolicyPeer = serde_json::from_value(serde_json::json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tokenscale"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}}
        }))
        .expect("peer");
        let policy =
            engine_network_policy(&md(CUDA_SPEC), std::slice::from_ref(&gateway)).expect("builds");
        let spec = policy.spec.expect("spec");
        let selector = spec
            .pod_selector
            .and_then(|s| s.match_labels)
            .unwrap_or_default();
        assert_eq!(selector["tokenscale.dev/model-deployment"], "llama");
        let rule = &spec.ingress.unwrap_or_default()[0];
        assert_eq!(rule.from.as_deref(), Some(std::slice::from_ref(&gateway)));
        let port = &rule.ports.as_deref().unwrap_or_default()[0];
        assert_eq!(port.port, Some(IntOrString::Int(ENGINE_PORT)));
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
        assert_eq!(policy.metadata.owner_references.map(|o| o.len()), Some(1));
    }
}
