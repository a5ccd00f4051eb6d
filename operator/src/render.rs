//! `tokenscale-operator render -f FILE`: the objects the operator would apply for each
//! `ModelDeployment` in a file, printed as YAML without a cluster (like `helm template`).
//! The same pure builders the reconciler uses; only what the API server would fill in (a
//! namespace when the file has none, the uid owner references point at) is supplied here.

use serde_json::Value;

use crate::children::cache::{cache_claim, fill_job};
use crate::children::{engine_deployment, engine_pdb, engine_service};
use crate::crd::ModelDeployment;

/// The uid owner references carry in rendered objects: the API server assigns the real one.
pub const PLACEHOLDER_UID: &str = "00000000-0000-0000-0000-000000000000";

/// Why a file could not be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// The text is not YAML.
    #[error("not YAML: {0}")]
    Yaml(String),
    /// No document is a `ModelDeployment`.
    #[error("no ModelDeployment in the file (documents of kind: {0})")]
    NothingToRender(String),
    /// One `ModelDeployment` is invalid.
    #[error("ModelDeployment {name}: {message}")]
    Invalid {
        /// Its `metadata.name`.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// Every `ModelDeployment` of `text` as the API server would return it: namespace `namespace`
/// when the document has none, the placeholder uid.
pub fn model_deployments(text: &str, namespace: &str) -> Result<Vec<ModelDeployment>, RenderError> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| RenderError::Yaml(e.to_string()))?;
    let kinds: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or("(none)").to_string())
        .collect();
    let mut out = Vec::new();
    for mut doc in docs.into_iter().filter(|d| d["kind"] == "ModelDeployment") {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or("(unnamed)")
            .to_string();
        let invalid = |message: String| RenderError::Invalid {
            name: name.clone(),
            message,
        };
        let metadata = doc["metadata"]
            .as_object_mut()
            .ok_or_else(|| invalid("no metadata".into()))?;
        metadata
            .entry("namespace")
            .or_insert_with(|| namespace.into());
        metadata
            .entry("uid")
            .or_insert_with(|| PLACEHOLDER_UID.into());
        let md: ModelDeployment =
            serde_json::from_value(doc).map_err(|e| invalid(e.to_string()))?;
        md.spec.validate().map_err(invalid)?;
        out.push(md);
    }
    if out.is_empty() {
        return Err(RenderError::NothingToRender(kinds.join(", ")));
    }
    Ok(out)
}

/// The YAML stream of the children of every `ModelDeployment` in `text`: for each, the claim
/// and Job of a filled cache, its engine Deployment (at `replicas.min`, the count the
/// operator starts from), Service and PodDisruptionBudget.
pub fn render(text: &str, namespace: &str) -> Result<String, RenderError> {
    let mut out = String::new();
    for md in model_deployments(text, namespace)? {
        let name = md.metadata.name.clone().unwrap_or_default();
        let child = |e: crate::children::ChildError| RenderError::Invalid {
            name: name.clone(),
            message: e.to_string(),
        };
        // A filled cache's claim and Job come first: the Deployment waits for the Job.
        let mut objects = Vec::new();
        if let Some(claim) = cache_claim(&md).map_err(child)? {
            objects.push(serde_json::to_value(claim));
        }
        if let Some(job) = fill_job(&md).map_err(child)? {
            objects.push(serde_json::to_value(job));
        }
        objects.extend([
            serde_json::to_value(engine_deployment(&md, md.spec.replicas.min).map_err(child)?),
            serde_json::to_value(engine_service(&md).map_err(child)?),
            serde_json::to_value(engine_pdb(&md).map_err(child)?),
        ]);
        for object in objects {
            let object = object.map_err(|e| RenderError::Yaml(e.to_string()))?;
            // Keys come sorted (apiVersion and kind first), as `kubectl get -o yaml` prints.
            let yaml =
                serde_saphyr::to_string(&object).map_err(|e| RenderError::Yaml(e.to_string()))?;
            out.push_str("---\n");
            out.push_str(&yaml);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
