//! `hf://ORG/REPO[@REVISION][/FILE]`: a model on the Hugging Face Hub, as users name it in the
//! engine's `--model`, the CRD's `model.source` and `tokenscale up` manifests. One parser, so
//! the operator accepts exactly what the engine can fetch.

use std::fmt;

/// The scheme prefix.
pub const HF_SCHEME: &str = "hf://";

/// A repository on the Hub, at a revision, optionally one file of it (a `.gguf`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSource {
    /// `org/repo`.
    pub repo: String,
    /// Branch, tag or commit hash; `None` means `main`.
    pub revision: Option<String>,
    /// A file inside the repository, when one is named.
    pub file: Option<String>,
}

/// Why an `hf://` source was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Hub source {text:?}: {why}; expected hf://ORG/REPO[@REVISION][/FILE]")]
pub struct HubSourceError {
    /// The rejected text.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// A repository or organisation name: letters, digits, `.`, `_`, `-`, starting with a letter
/// or digit, no `--` or `..` (the Hub's own rules, which also keep cache folder names unique).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !s.contains("--")
        && !s.contains("..")
}

impl HubSource {
    /// Parses `hf://ORG/REPO[@REVISION][/FILE]`; `None` when `text` is not an `hf://` source.
    pub fn parse(text: &str) -> Option<Result<Self, HubSourceError>> {
        let rest = text.strip_prefix(HF_SCHEME)?;
        let err = |why| HubSourceError {
            text: text.to_string(),
            why,
        };
        Some((|| {
            if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(err("whitespace is not allowed"));
            }
            let (org, rest) = rest
                .split_once('/')
                .ok_or_else(|| err("it needs ORG/REPO"))?;
            let (repo_rev, file) = match rest.split_once('/') {
                Some((r, f)) => (r, Some(f)),
                None => (rest, None),
            };
            let (repo, revision) = match repo_rev.split_once('@') {
                Some((r, rev)) => (r, Some(rev)),
                None => (repo_rev, None),
            };
            if !is_name(org) || !is_name(repo) {
                return Err(err(
                    "ORG and REPO use letters, digits, '.', '_' and '-' (no '--' or '..')",
                ));
            }
            if let Some(rev) = revision
                && (rev.is_empty()
                    || rev.len() > 128
                    || !rev
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            {
                return Err(err(
                    "a REVISION is a branch, tag or commit of letters, digits, '.', '_' and '-'",
                ));
            }
            let file = match file {
                None | Some("") => None,
                Some(f) => {
                    let parts_ok = f
                        .split('/')
                        .all(|p| !p.is_empty() && p != "." && p != ".." && !p.starts_with(".."));
                    if !parts_ok || f.contains('\\') {
                        return Err(err(
                            "FILE must be a relative path without '.', '..' or '\\'",
                        ));
                    }
                    Some(f.to_string())
                }
            };
            Ok(Self {
                repo: format!("{org}/{repo}"),
                revision: revision.map(str::to_string),
                file,
            })
        })())
    }

    /// The revision to resolve: the given one, or `main`.
    pub fn revision_or_main(&self) -> &str {
        self.revision.as_deref().unwrap_or("main")
    }

    /// The repository with its revision and file, without the scheme: `org/repo@rev/file`.
    pub fn display_name(&self) -> String {
        let s = self.to_string();
        s[HF_SCHEME.len()..].to_string()
    }
}

impl fmt::Display for HubSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{HF_SCHEME}{}", self.repo)?;
        if let Some(rev) = &self.revision {
            write!(f, "@{rev}")?;
        }
        if let Some(file) = &self.file {
            write!(f, "/{file}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> HubSource {
        match HubSource::parse(text) {
            Some(Ok(s)) => s,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn parses_repo_revision_and_file_and_round_trips() {
        let s = ok("hf://meta-llama/Llama-3.1-8B-Instruct");
        assert_eq!(
            (s.repo.as_str(), s.revision.as_deref(), s.file.as_deref()),
            ("meta-llama/Llama-3.1-8B-Instruct", None, None)
        );
        assert_eq!(s.revision_or_main(), "main");
        let s = ok("hf://Qwen/Qwen3-8B@v1.0");
        assert_eq!(
            (s.repo.as_str(), s.revision.as_deref()),
            ("Qwen/Qwen3-8B", Some("v1.0"))
        );
        let s = ok("hf://org/repo-GGUF@0123abcd/sub/model.Q4_1.gguf");
        assert_eq!(s.file.as_deref(), Some("sub/model.Q4_1.gguf"));
        assert_eq!(s.revision.as_deref(), Some("0123abcd"));
        for text in [
            "hf://meta-llama/Llama-3.1-8B-Instruct",
            "hf://Qwen/Qwen3-8B@v1.0",
            "hf://org/repo-GGUF@0123abcd/sub/model.Q4_1.gguf",
            "hf://org/repo/model.gguf",
        ] {
            assert_eq!(ok(text).to_string(), text);
        }
        assert_eq!(ok("hf://a/b@main/f.gguf").display_name(), "a/b@main/f.gguf");
    }

    #[test]
    fn other_schemes_are_not_hub_sources() {
        assert!(HubSource::parse("smollm2-135m").is_none());
        assert!(HubSource::parse("/models/x.gguf").is_none());
        assert!(HubSource::parse("file:///x").is_none());
    }

    #[test]
    fn rejects_with_the_reason() {
        let cases = [
            ("hf://org", "ORG/REPO"),
            ("hf:///repo", "ORG and REPO"),
            ("hf://org/", "ORG and REPO"),
            ("hf://or--g/repo", "ORG and REPO"),
            ("hf://org/re po", "whitespace"),
            ("hf://org/repo@", "REVISION"),
            ("hf://org/repo@a:b", "REVISION"),
            ("hf://org/repo/../etc/passwd", "FILE"),
            ("hf://org/repo/a//b", "FILE"),
        ];
        for (text, why) in cases {
            let err = HubSource::parse(text)
                .expect(text)
                .expect_err(text)
                .to_string();
            assert!(err.contains(why) && err.contains(text), "{text}: {err}");
        }
    }
}
