//! Default CPU/memory per backend, merged with the spec's overrides, plus GPUs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::{Backend, EngineSpec, ResourceAmounts};

/// The extended resource name of NVIDIA GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// `[(resource, quantity); 2]`: cpu and memory.
type Amounts = [(&'static str, &'static str); 2];

/// (requests, limits) of cpu and memory when the spec says nothing: sized for the backend.
fn defaults(backend: Backend) -> (Amounts, Amounts) {
    match backend {
        // CPU inference is compute-bound: give it cores; small models need little memory.
        Backend::Cpu => (
            [("cpu", "2"), ("memory", "2Gi")],
            [("cpu", "4"), ("memory", "4Gi")],
        ),
        // The GPU does the work; host memory holds the weights while loading.
        Backend::Cuda => (
            [("cpu", "4"), ("memory", "16Gi")],
            [("cpu", "8"), ("memory", "32Gi")],
        ),
        Backend::Sim => (
            [("cpu", "250m"), ("memory", "256Mi")],
            [("cpu", "1"), ("memory", "512Mi")],
        ),
    }
}

fn merged(
    defaults: [(&str, &str); 2],
    overrides: Option<&ResourceAmounts>,
) -> BTreeMap<String, Quantity> {
    let mut list: BTreeMap<String, Quantity> = defaults
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
    if let Some(overrides) = overrides {
        list.extend(overrides.to_resource_list());
    }
    list
}

/// Requests and limits of the engine container: defaults, the spec's overrides, and
/// `nvidia.com/gpu` in both when the replica uses GPUs (extended resources need equal values).
pub fn engine_resources(engine: &EngineSpec) -> ResourceRequirements {
    let (default_requests, default_limits) = defaults(engine.backend);
    let spec = engine.resources.as_ref();
    let mut requests = merged(default_requests, spec.and_then(|r| r.requests.as_ref()));
    let mut limits = merged(default_limits, spec.and_then(|r| r.limits.as_ref()));
    let gpus = engine.gpus_per_replica();
    if gpus > 0 {
        requests.insert(GPU_RESOURCE.into(), Quantity(gpus.to_string()));
        limits.insert(GPU_RESOURCE.into(), Quantity(gpus.to_string()));
    }
    ResourceRequirements {
        requests: Some(requests),
        limits: Some(limits),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EngineResources, Quantity as SpecQuantity};

    #[test]
    fn cuda_gets_gpus_in_requests_and_limits() {
        let engine = EngineSpec {
            gpus_per_replica: Some(2),
            ..EngineSpec::default()
        };
        let r = engine_resources(&engine);
        let (requests, limits) = (r.requests.unwrap_or_default(), r.limits.unwrap_or_default());
        assert_eq!(requests[GPU_RESOURCE].0, "2");
        assert_eq!(limits[GPU_RESOURCE].0, "2");
        assert_eq!(requests["memory"].0, "16Gi");
    }

    #[test]
    fn overrides_replace_only_the_keys_given() {
        let engine = EngineSpec {
            backend: Backend::Cpu,
            resources: Some(EngineResources {
                requests: Some(ResourceAmounts {
                    cpu: SpecQuantity::parse("500m").ok(),
                    ..ResourceAmounts::default()
                }),
                limits: None,
            }),
            ..EngineSpec::default()
        };
        let r = engine_resources(&engine);
        let requests = r.requests.unwrap_or_default();
        assert_eq!(requests["cpu"].0, "500m");
        assert_eq!(requests["memory"].0, "2Gi");
        assert!(!requests.contains_key(GPU_RESOURCE));
        assert_eq!(r.limits.unwrap_or_default()["cpu"].0, "4");
    }
}
