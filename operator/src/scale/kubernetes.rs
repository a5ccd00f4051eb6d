//! The Kubernetes scale target: the engine Deployment's `scale` subresource, and the
//! `controller.kubernetes.io/pod-deletion-cost` annotation that decides which pods go.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{ReplicaCounts, ScaleError, ScaleTarget, removal_plan};
use crate::autoscaler::ReplicaLoad;
use crate::children::FIELD_MANAGER;

/// The annotation the ReplicaSet controller reads when it picks pods to delete (lowest first).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// Cost given to the pods chosen for removal: far below the default of 0.
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

    /// Sets (or, with `None`, removes) the deletion cost of `pod`.
    async fn annotate(&self, pod: &str, cost: Option<i32>, action: &str) -> Result<(), ScaleError> {
        // In a merge patch `null` deletes the key.
        let value = cost.map(|c| c.to_string());
        let patch = Patch::Merge(json!({
            "metadata": { "annotations": { POD_DELETION_COST: value } }
        }));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        self.pods
            .patch(pod, &params, &patch)
            .await
            .map_err(|e| ScaleError {
                action: format!("{action} pod {pod}"),
                message: e.to_string(),
                source: Some(Box::new(e)),
            })?;
        Ok(())
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
        let marked = self.mark_many_for_removal(loads, 1, &[]).await?;
        Ok(marked.into_iter().next())
    }

    async fn mark_many_for_removal(
        &self,
        loads: &[ReplicaLoad],
        count: u32,
        marked_before: &[String],
    ) -> Result<Vec<String>, ScaleError> {
        let plan = removal_plan(loads, count, marked_before);
        // Stale marks first: until they go, a pod that stays could be taken instead.
        for pod in &plan.clear {
            self.annotate(pod, None, "clearing the removal mark of")
                .await?;
        }
        for pod in &plan.mark {
            self.annotate(pod, Some(REMOVAL_COST), "marking for removal")
                .await?;
        }
        Ok(plan.mark)
    }
}
