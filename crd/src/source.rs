//! `ModelSource`: where an engine replica gets its weights, parsed from `spec.model.source`.
//! `hf://` sources are parsed by the engine's own parser (`tokenscale_common::hub_source`), so
//! the operator accepts exactly what the engine fetches.

use std::fmt;

pub use tokenscale_common::hub_source::HubSource;

/// Schema pattern for `spec.model.source`: `file:///abs/path`, `hf://org/repo[@rev][/file]`,
/// `pvc://claim/path`, or an alias such as `smollm2-135m-instruct`.
pub const MODEL_SOURCE_PATTERN: &str = r"^(file:///[^\s]+|hf://[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._-]+)?(/[^\s]+)?|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?/[^\s]+|[a-z0-9][a-z0-9._-]*)$";

/// Why a model source was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid model source {text:?}: {why}; expected file:///path, hf://org/repo[@revision][/file], \
     pvc://claim/path or an alias like smollm2-135m-instruct"
)]
pub struct ModelSourceError {
    /// The rejected text.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// A parsed model source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A path already present in the engine image (or a volume the user mounts).
    File {
        /// Absolute path inside the container.
        path: String,
    },
    /// A Hugging Face repository at a revision, optionally one file of it (a `.gguf`).
    HuggingFace(HubSource),
    /// A file on a PersistentVolumeClaim in the same namespace.
    Pvc {
        /// The claim name.
        claim: String,
        /// Path of the model inside the volume.
        path: String,
    },
    /// A name the engine resolves itself (e.g. `smollm2-135m-instruct`), fetched into its cache.
    Alias(String),
}

impl ModelSource {
    /// Parses `spec.model.source`.
    pub fn parse(text: &str) -> Result<Self, ModelSourceError> {
        let err = |why| ModelSourceError {
            text: text.to_string(),
            why,
        };
        if text.chars().any(char::is_whitespace) {
            return Err(err("whitespace is not allowed"));
        }
        if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') || path.len() < 2 {
                return Err(err("a file:// source needs an absolute path"));
            }
            return Ok(Self::File {
                path: path.to_string(),
            });
        }
        if let Some(hub) = HubSource::parse(text) {
            return hub.map(Self::HuggingFace).map_err(|e| err(e.why));
        }
        if let Some(rest) = text.strip_prefix("pvc://") {
            let (claim, path) = rest.split_once('/').unwrap_or((rest, ""));
            if !is_dns_label(claim) {
                return Err(err("the claim name must be a DNS-1123 label"));
            }
            if path.is_empty() || path.split('/').any(|p| p == "..") {
                return Err(err(
                    "a pvc:// source needs a path inside the volume, without '..'",
                ));
            }
            return Ok(Self::Pvc {
                claim: claim.to_string(),
                path: path.to_string(),
            });
        }
        if text.contains("://") {
            return Err(err("unknown scheme"));
        }
        let alias_ok = text.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && text
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
        if !alias_ok {
            return Err(err(
                "an alias uses lower-case letters, digits, '.', '_' and '-'",
            ));
        }
        Ok(Self::Alias(text.to_string()))
    }
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { path } => write!(f, "file://{path}"),
            Self::HuggingFace(hub) => write!(f, "{hub}"),
            Self::Pvc { claim, path } => write!(f, "pvc://{claim}/{path}"),
            Self::Alias(name) => f.write_str(name),
        }
    }
}

/// True for a DNS-1123 subdomain (the names of Secrets and claims): dot-separated labels, at
/// most 253 characters.
pub fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_dns_label)
}

/// True for a DNS-1123 label: lower-case alphanumerics and '-', at most 63 characters.
pub fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme_and_round_trips() {
        let cases = [
            (
                "file:///models/m.gguf",
                ModelSource::File {
                    path: "/models/m.gguf".into(),
                },
            ),
            (
                "hf://HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2.q4_1.gguf",
                ModelSource::HuggingFace(HubSource {
                    repo: "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF".into(),
                    revision: None,
                    file: Some("smollm2.q4_1.gguf".into()),
                }),
            ),
            (
                "hf://org/repo",
                ModelSource::HuggingFace(HubSource {
                    repo: "org/repo".into(),
                    revision: None,
                    file: None,
                }),
            ),
            (
                "hf://meta-llama/Llama-3.1-8B-Instruct@0e9e39f249a16976918f6564b8830bc894c89659",
                ModelSource::HuggingFace(HubSource {
                    repo: "meta-llama/Llama-3.1-8B-Instruct".into(),
                    revision: Some("0e9e39f249a16976918f6564b8830bc894c89659".into()),
                    file: None,
                }),
            ),
            (
                "pvc://models/llama/8b.gguf",
                ModelSource::Pvc {
                    claim: "models".into(),
                    path: "llama/8b.gguf".into(),
                },
            ),
            (
                "smollm2-135m-instruct",
                ModelSource::Alias("smollm2-135m-instruct".into()),
            ),
        ];
        for (text, want) in cases {
            let got = ModelSource::parse(text).expect(text);
            assert_eq!(got, want);
            assert_eq!(got.to_string(), text);
        }
    }

    #[test]
    fn rejects_with_the_reason() {
        let cases = [
            ("file://relative", "absolute path"),
            ("hf://org", "ORG/REPO"),
            ("hf://org/repo@", "REVISION"),
            ("hf://org/repo/../x", "FILE"),
            ("pvc://Bad_Claim/x", "DNS-1123"),
            ("pvc://claim", "path inside the volume"),
            ("pvc://claim/../etc", "without '..'"),
            ("s3://bucket/x", "unknown scheme"),
            ("My Model", "whitespace"),
            ("MyModel", "alias"),
        ];
        for (text, why) in cases {
            let err = ModelSource::parse(text).expect_err(text).to_string();
            assert!(err.contains(why) && err.contains(text), "{text}: {err}");
        }
    }
}
