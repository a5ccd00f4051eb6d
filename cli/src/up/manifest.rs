//! Reading a `ModelDeployment` manifest for `tokenscale up`: the operator's own spec type, so
//! the same file runs on one machine and in a cluster.

use serde::Deserialize;
use tokenscale_crd::{Backend, EngineKind, ModelDeploymentSpec, ModelSource};

use super::UpError;

/// The bundled default: SmolLM2 on the CPU.
pub const DEFAULT_MANIFEST: &str = include_str!("../../../examples/smollm2.yaml");

/// The parts of the resource `up` reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub kind: String,
    pub metadata: Metadata,
    pub spec: ModelDeploymentSpec,
}

/// `metadata.name`.
#[derive(Debug, Clone, Deserialize)]
pub struct Metadata {
    pub name: String,
}

impl Manifest {
    /// Parses and checks a manifest text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let manifest: Self = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        manifest.checked()
    }

    /// The manifest if `up` can run it: a valid `ModelDeployment` whose engine runs here.
    pub fn checked(self) -> Result<Self, String> {
        let manifest = self;
        if manifest.kind != "ModelDeployment" {
            return Err(format!(
                "kind is {:?}, expected ModelDeployment",
                manifest.kind
            ));
        }
        manifest
            .spec
            .validate()
            .map_err(|e| format!("invalid spec: {e}"))?;
        // Our engine's GPU replicas need the cluster's GPU scheduling; another engine's
        // program picks its devices itself.
        if manifest.spec.engine.kind == EngineKind::Tokenscale
            && !matches!(manifest.spec.engine.backend, Backend::Cpu | Backend::Sim)
        {
            return Err(
                "engine.backend: tokenscale up runs `cpu` or `sim` replicas on this machine".into(),
            );
        }
        Ok(manifest)
    }

    /// The name clients use.
    pub fn served_name(&self) -> String {
        self.spec
            .model
            .served_name
            .clone()
            .unwrap_or_else(|| self.metadata.name.clone())
    }

    /// The model the engines serve: an alias, a local path or an `hf://` source (fetched once
    /// by `up`, before the engines start). `sim` needs none.
    pub fn engine_model(&self) -> Result<Option<String>, UpError> {
        if self.spec.engine.backend == Backend::Sim {
            return Ok(None);
        }
        match ModelSource::parse(&self.spec.model.source)
            .map_err(|e| UpError::Manifest(e.to_string()))?
        {
            ModelSource::File { path } => Ok(Some(path)),
            ModelSource::Alias(name) => Ok(Some(name)),
            ModelSource::HuggingFace(hub) => Ok(Some(hub.to_string())),
            other => Err(UpError::Manifest(format!(
                "model.source {other}: tokenscale up reads file:// paths, hf:// sources and aliases"
            ))),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_example_parses() {
        let m = Manifest::parse(DEFAULT_MANIFEST).unwrap();
        assert_eq!(m.served_name(), "smollm2-135m-instruct");
        assert_eq!(m.engine_model().unwrap().as_deref(), Some("smollm2-135m"));
    }

    #[test]
    fn a_cluster_only_backend_or_kind_is_refused() {
        let cuda = DEFAULT_MANIFEST.replace("backend: cpu", "backend: cuda");
        assert!(
            Manifest::parse(&cuda)
                .unwrap_err()
                .contains("engine.backend")
        );
        let other = DEFAULT_MANIFEST.replace("kind: ModelDeployment", "kind: Deployment");
        assert!(Manifest::parse(&other).unwrap_err().contains("kind"));
    }

    #[test]
    fn hub_sources_are_fetched_by_up_and_pvc_ones_are_not() {
        let source = |s: &str| {
            DEFAULT_MANIFEST
                .replace("source: smollm2-135m", &format!("source: {s}"))
                .replace("format: gguf", "")
        };
        let hub = Manifest::parse(&source("hf://Qwen/Qwen3-0.6B@main")).unwrap();
        assert_eq!(
            hub.engine_model().unwrap().as_deref(),
            Some("hf://Qwen/Qwen3-0.6B@main")
        );
        let pvc = Manifest::parse(&source("pvc://models/m.gguf")).unwrap();
        assert!(
            pvc.engine_model()
                .unwrap_err()
                .to_string()
                .contains("reads file:// paths, hf://")
        );
    }
}
