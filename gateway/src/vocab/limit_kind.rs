//! `LimitKind`: which of a tenant's per-minute limits a count or a refusal is about.

/// Which limit refused a request (in JSON, as [`LimitKind::as_str`] writes it).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// Requests per minute.
    Requests,
    /// Input tokens per minute.
    InputTokens,
    /// Output tokens per minute.
    OutputTokens,
}

impl LimitKind {
    /// Label value on the rate-limited counter.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::InputTokens => "input_tokens",
            Self::OutputTokens => "output_tokens",
        }
    }

    /// Short name in store keys.
    pub fn key(self) -> &'static str {
        match self {
            Self::Requests => "rpm",
            Self::InputTokens => "itpm",
            Self::OutputTokens => "otpm",
        }
    }
}
