//! The objects a `ModelDeployment` owns, built by pure functions: the engine `Deployment`
//! (its container rendered per engine kind in `engines/`), its `Service` and its
//! `PodDisruptionBudget`. Names, labels and owner references live here
//! so every child agrees on them.

pub mod cache;
pub mod deployment;
pub mod engines;
pub mod network_policy;
pub mod pdb;
pub mod resources;
pub mod rollout;
pub mod service;
pub mod spread;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

pub use deployment::engine_deployment;
pub use network_policy::engine_network_policy;
pub use pdb::engine_pdb;
pub use service::engine_service;

use crate::ModelDeployment;

/// The one field manager the operator applies with.
pub const FIELD_MANAGER: &str = "tokenscale-operator";
/// Port the engine serves HTTP (OpenAI API, `/health`, `/metrics`) on.
pub const ENGINE_PORT: i32 = 8000;
/// Name of the engine's HTTP port on the container and the Service.
pub const ENGINE_PORT_NAME: &str = "http";
/// Label carrying the owning `ModelDeployment`'s name on every child and engine pod.
pub const LABEL_MODEL_DEPLOYMENT: &str = "tokenscale.dev/model-deployment";
/// Annotation on the Service carrying the served model name (label values cannot hold it).
pub const ANNOTATION_SERVED_MODEL: &str = "tokenscale.dev/served-model";
/// Suffix of every child's name.
const CHILD_SUFFIX: &str = "-engine";

/// Why a child could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChildError {
    /// The `ModelDeployment` lacks metadata a child needs (it was not read from the API).
    #[error("the ModelDeployment has no metadata.{0}")]
    MissingMetadata(&'static str),
    /// The name is too long for a Service name once suffixed.
    #[error(
        "name {name:?} is too long: the engine Service name {name}{CHILD_SUFFIX} must fit in 63 characters"
    )]
    NameTooLong {
        /// The resource's name.
        name: String,
    },
    /// The spec is invalid.
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
}

/// Name shared by the Deployment, Service and PDB of `md`.
pub fn child_name(md: &ModelDeployment) -> String {
    format!("{}{CHILD_SUFFIX}", md.name_any())
}

/// The model name clients use: `spec.model.servedName`, else the resource's name.
pub fn served_name(md: &ModelDeployment) -> String {
    md.spec
        .model
        .served_name
        .clone()
        .unwrap_or_else(|| md.name_any())
}

/// Labels that select the engine pods of `md` (stable: never change them for a live object).
pub fn selector_labels(md: &ModelDeployment) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "tokenscale-engine".to_string(),
        ),
        (LABEL_MODEL_DEPLOYMENT.to_string(), md.name_any()),
    ])
}

/// The selector as a label-selector string, as `status.selector` carries it.
pub fn selector_string(md: &ModelDeployment) -> String {
    selector_labels(md)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Selector labels plus the descriptive ones every child carries.
pub fn common_labels(md: &ModelDeployment) -> BTreeMap<String, String> {
    let mut labels = selector_labels(md);
    labels.insert("app.kubernetes.io/component".into(), "engine".into());
    labels.insert("app.kubernetes.io/part-of".into(), "tokenscale".into());
    labels.insert("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into());
    labels
}

/// Metadata of a child: name, namespace, labels, and `md` as its controlling owner.
pub fn child_metadata(md: &ModelDeployment) -> Result<ObjectMeta, ChildError> {
    let namespace = md
        .namespace()
        .ok_or(ChildError::MissingMetadata("namespace"))?;
    let owner: OwnerReference = md
        .controller_owner_ref(&())
        .ok_or(ChildError::MissingMetadata("uid"))?;
    let name = child_name(md);
    if name.len() > 63 {
        return Err(ChildError::NameTooLong {
            name: md.name_any(),
        });
    }
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(namespace),
        labels: Some(common_labels(md)),
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    })
}

#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod test_support {
    //! A valid `ModelDeployment` as the API server would return it, for builder tests (and the
    //! operator's unit tests: feature `test-support`).
    use crate::ModelDeployment;

    pub fn md(yaml_spec: &str) -> ModelDeployment {
        let text = format!(
            "apiVersion: tokenscale.dev/v1alpha1\nkind: ModelDeployment\nmetadata:\n  name: llama\n  \
             namespace: models\n  uid: 1234-5678\n  generation: 3\nspec:\n{yaml_spec}"
        );
        serde_saphyr::from_str(&text).expect("test manifest parses")
    }

    pub const CUDA_SPEC: &str = "  model: {source: \"pvc://weights/llama-8b.gguf\", servedName: llama-3-8b}\n  \
        engine: {image: \"tokenscale/engine:test\", backend: cuda, gpusPerReplica: 2}\n  \
        replicas: {min: 1, max: 8}\n  slo: {ttftP95: 500ms, tpotP95: 50ms}\n";
}
