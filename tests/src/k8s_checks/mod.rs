//! Checks on Kubernetes manifests, pure (values in, findings out) so each rule is unit-tested
//! with a manifest that breaks it: typed parsing with unknown fields rejected, the pod
//! security every tokenscale pod must carry, least-privilege RBAC, and CRD sameness.

pub mod crd;
pub mod json_diff;
pub mod monitoring;
pub mod objects;
pub mod rbac;
pub mod security;
pub mod typed;

pub use objects::{Object, parse_documents};
pub use typed::Typed;

/// A manifest that cannot be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The text is not YAML.
    #[error("YAML does not parse: {0}")]
    Yaml(#[from] serde_saphyr::Error),
    /// A document lacks what every Kubernetes object has.
    #[error("document {index}: {reason}")]
    NotAnObject {
        /// Position of the document in the stream, from 0.
        index: usize,
        /// What is missing.
        reason: String,
    },
    /// The object does not deserialize as its Kubernetes type.
    #[error("{object}: not a valid {kind}: {source}")]
    Type {
        /// `Kind namespace/name` of the object.
        object: String,
        /// Kind it was parsed as.
        kind: String,
        /// Why serde refused it.
        #[source]
        source: serde_json::Error,
    },
    /// The object has fields its type does not have (a typo, or a field in the wrong place).
    #[error("{object}: fields the {kind} type does not have (or with values it changes): {paths}")]
    UnknownFields {
        /// `Kind namespace/name` of the object.
        object: String,
        /// Kind it was parsed as.
        kind: String,
        /// JSON paths that did not survive a typed round trip.
        paths: String,
    },
    /// A kind the checks have no type for.
    #[error("{object}: no type known for {api_version} {kind}")]
    UnknownKind {
        /// `Kind namespace/name` of the object.
        object: String,
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
}

/// One rule a manifest breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What broke it: `Kind namespace/name`, plus the container where it applies.
    pub object: String,
    /// The rule, short and stable (tests match on it).
    pub rule: &'static str,
    /// What was found instead.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.object, self.rule, self.detail)
    }
}
