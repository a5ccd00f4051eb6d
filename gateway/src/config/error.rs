//! A configuration that cannot be used, and where: the error every concept's section check returns.

use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;

/// A configuration that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The YAML is malformed, has an unknown field or a value of the wrong type.
    #[error("{file}{message}")]
    Parse {
        /// `path: ` prefix once known.
        file: String,
        /// The parser's message (it names the line and column).
        message: String,
    },
    /// A value is of the right type but not acceptable.
    #[error("{file}line {line}: {reason}")]
    Invalid {
        /// `path: ` prefix once known.
        file: String,
        /// 1-based line of the value.
        line: u64,
        /// Why it is refused.
        reason: String,
    },
}

impl ConfigError {
    pub(super) fn parse(error: serde_saphyr::Error) -> Self {
        Self::Parse {
            file: String::new(),
            message: error.to_string(),
        }
    }

    /// A value refused at its line.
    pub fn invalid<T>(at: &Spanned<T>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            file: String::new(),
            line: at.referenced.line(),
            reason: reason.into(),
        }
    }

    /// A value refused at a line (0: the whole file).
    pub fn invalid_at(line: u64, reason: impl Into<String>) -> Self {
        Self::Invalid {
            file: String::new(),
            line,
            reason: reason.into(),
        }
    }

    /// Prefixes the message with the file it came from.
    pub fn in_file(self, path: &Path) -> Self {
        let prefix = format!("{}: ", path.display());
        match self {
            Self::Parse { message, .. } => Self::Parse {
                file: prefix,
                message,
            },
            Self::Invalid { line, reason, .. } => Self::Invalid {
                file: prefix,
                line,
                reason,
            },
            read @ Self::Read { .. } => read,
        }
    }
}

/// The first failed check of a section that has no spans (defaults fill such sections, so
/// line 0 means "the whole file"): each check is (whether it failed, why).
pub fn first_failed(checks: &[(bool, &str)]) -> Result<(), ConfigError> {
    match checks.iter().find(|(bad, _)| *bad) {
        Some((_, reason)) => Err(ConfigError::invalid_at(0, *reason)),
        None => Ok(()),
    }
}
