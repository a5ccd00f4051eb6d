//! The operator's error type: what failed, with its source, and a short label for metrics.

use crate::children::ChildError;

/// Everything a reconcile (or the operator around it) can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed (conflict, server error, network...).
    #[error("Kubernetes API call failed while {action}: {source}")]
    Kube {
        /// What the operator was doing, e.g. "applying Deployment models/llama-engine".
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The ModelDeployment cannot be acted on (its spec fails validation).
    #[error("invalid ModelDeployment: {0}")]
    InvalidSpec(String),
    /// A child object could not be built.
    #[error("building a child object failed: {0}")]
    Child(#[from] ChildError),
    /// A scale target could not be read or changed.
    #[error("scale target: {0}")]
    Scale(String),
    /// A value could not be turned into JSON.
    #[error("serialising {what} failed: {source}")]
    Serialize {
        /// What was being serialised.
        what: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

/// `Result` with the operator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps a client error with what the operator was doing.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            action: action.into(),
            source,
        }
    }

    /// A short, bounded label for the failures metric (`reason` label).
    pub fn metric_label(&self) -> String {
        match self {
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            } => match status.code {
                409 => "conflict".into(),
                404 => "not_found".into(),
                403 => "forbidden".into(),
                422 => "invalid".into(),
                429 => "throttled".into(),
                code if code >= 500 => "server_error".into(),
                _ => "api_error".into(),
            },
            Self::Kube { .. } => "client_error".into(),
            Self::InvalidSpec(_) => "invalid_spec".into(),
            Self::Child(_) => "child_build".into(),
            Self::Scale(_) => "scale".into(),
            Self::Serialize { .. } => "serialize".into(),
        }
    }

    /// True for errors that retrying cannot fix until the user edits the object.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::InvalidSpec(_) | Self::Child(_))
    }
}
