//! The engine `Service`: a stable address and the EndpointSlices the gateway routes by.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    ANNOTATION_SERVED_MODEL, ChildError, ENGINE_PORT, ENGINE_PORT_NAME, child_metadata,
    selector_labels, served_name,
};
use crate::ModelDeployment;

/// The ClusterIP Service in front of `md`'s engine pods. Only ready pods get endpoints, so a
/// loading or draining replica receives no traffic.
pub fn engine_service(md: &ModelDeployment) -> Result<Service, ChildError> {
    let mut metadata = child_metadata(md)?;
    metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_SERVED_MODEL.to_string(),
        served_name(md),
    )]));
    Ok(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_labels(md)),
            ports: Some(vec![ServicePort {
                name: Some(ENGINE_PORT_NAME.into()),
                port: ENGINE_PORT,
                target_port: Some(IntOrString::String(ENGINE_PORT_NAME.into())),
                protocol: Some("TCP".into()),
                app_protocol: Some("http".into()),
                ..Default::default()
            }]),
            publish_not_ready_addresses: Some(false),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::test_support::{CUDA_SPEC, md};

    #[test]
    fn selects_engine_pods_and_names_the_served_model() {
        let svc = engine_service(&md(CUDA_SPEC)).expect("builds");
        let annotations = svc.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations[ANNOTATION_SERVED_MODEL], "llama-3-8b");
        let spec = svc.spec.expect("spec");
        let selector = spec.selector.unwrap_or_default();
        assert_eq!(selector["tokenscale.dev/model-deployment"], "llama");
        assert_eq!(spec.ports.unwrap_or_default()[0].port, ENGINE_PORT);
        assert_eq!(svc.metadata.owner_references.map(|o| o.len()), Some(1));
    }
}
