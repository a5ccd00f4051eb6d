//! The Kubernetes scale target: the engine Deployment's `scale` subresource, and the
//! `controller.kubernetes.io/pod-deletion-cost` annotation that decides which pod goes.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{ReplicaCounts, ScaleError, ScaleTarget, least_loaded};
use crate::autoscaler::ReplicaLoad;
use crate::children::FIELD_MANAGER;

/// The annotation the ReplicaSet controller reads when it picks pods to delete (lowest first).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// Cost given to the pod chosen for removal: far below the default of 0.
pub const REMOVAL_COST: i32 = -1_000_000;

/// One engine Deployment as a scale target.
#[derive(Clone)]
pub struct KubernetesScaleTarget {
    deployments: Api<Deployment>,
    pods: Api<Pod>,
    name: String,
}

impl KubernetesScaleTarget {
    /// The Deployment `name` in `namespace`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            deployments: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }

    fn error(&self, action: &str, source: kube::Error) -> ScaleError {
        ScaleError {
            action: format!("{action} Deployment {}", self.name),
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }
}

fn count(value: Option<i32>) -> u32 {
    value.unwrap_or(0).max(0).unsigned_abs()
}

impl ScaleTarget for KubernetesScaleTarget {
    async fn replicas(&self) -> Result<Option<ReplicaCounts>, ScaleError> {
        let deployment = self
            .deployments
            .get_opt(&self.name)
            .await
            .map_err(|e| self.error("reading", e))?;
        Ok(deployment.map(|d| {
            let status = d.status.unwrap_or_default();
            ReplicaCounts {
                desired: count(d.spec.replicas.or(Some(1))),
                current: count(status.replicas),
                ready: count(status.ready_replicas),
            }
        }))
    }

    async fn set_replicas(&self, replicas: u32) -> Result<(), ScaleError> {
        let patch = Patch::Merge(json!({ "spec": { "replicas": replicas } }));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        self.deployments
            .patch_scale(&self.name, &params, &patch)
            .await
            .map_err(|e| self.error("scaling", e))?;
        Ok(())
    }

    async fn mark_for_removal(&self, loads: &[ReplicaLoad]) -> Result<Option<String>, ScaleError> {
        let Some(victim) = least_loaded(loads) else {
            return Ok(None);
        };
        let patch = Patch::Merge(json!({
            "metadata": { "annotations": { POD_DELETION_COST: REMOVAL_COST.to_string() } }
        }));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        self.pods
            .patch(&victim.name, &params, &patch)
            .await
            .map_err(|e| ScaleError {
                action: format!("marking pod {} for removal", victim.name),
                message: e.to_string(),
                source: Some(Box::new(e)),
            })?;
        Ok(Some(victim.name.clone()))
    }
}
