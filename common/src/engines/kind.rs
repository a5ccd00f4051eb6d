//! `EngineKind`: which engine a replica runs, as `spec.engine.kind` names it.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::dialect::{Dialect, SampleRef};
use super::{llamacpp, sglang, tokenscale, vllm};

/// The engine a replica runs.
#[derive(
    JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// tokenscale's own engine (`tokenscale-engine serve`).
    #[default]
    Tokenscale,
    /// vLLM's OpenAI server (`vllm serve`).
    Vllm,
    /// SGLang's server (`python3 -m sglang.launch_server`).
    Sglang,
    /// llama.cpp's `llama-server`.
    Llamacpp,
}

/// An engine kind name that is none of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown engine kind {0:?}: expected tokenscale, vllm, sglang or llamacpp")]
pub struct EngineKindError(pub String);

impl EngineKind {
    /// Every kind, in the order they are documented.
    pub const ALL: [Self; 4] = [Self::Tokenscale, Self::Vllm, Self::Sglang, Self::Llamacpp];

    /// The name in manifests, labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tokenscale => "tokenscale",
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
            Self::Llamacpp => "llamacpp",
        }
    }

    /// The engine's own name, for messages.
    pub fn display_name(self) -> &'static str {
        match self {
            Self::Tokenscale => "tokenscale's engine",
            Self::Vllm => "vLLM",
            Self::Sglang => "SGLang",
            Self::Llamacpp => "llama.cpp",
        }
    }

    /// The metric names this engine exports, and how its series are filtered.
    pub fn dialect(self) -> &'static Dialect {
        match self {
            Self::Tokenscale => &tokenscale::DIALECT,
            Self::Vllm => &vllm::DIALECT,
            Self::Sglang => &sglang::DIALECT,
            Self::Llamacpp => &llamacpp::DIALECT,
        }
    }

    /// The kind that exported `samples`, told from the metric names, for a client that was
    /// not told (the gateway in front of static upstreams). tokenscale's engine also exports
    /// vLLM's names, so its own `tokenscale_engine_` series decide first.
    pub fn detect<'a>(samples: impl IntoIterator<Item = SampleRef<'a>>) -> Option<Self> {
        let mut counts = [0usize; 4];
        for sample in samples {
            let name = sample.name;
            if name.starts_with("tokenscale_engine_") {
                return Some(Self::Tokenscale);
            }
            for (i, prefix) in ["", "vllm:", "sglang:", "llamacpp:"]
                .iter()
                .enumerate()
                .skip(1)
            {
                if name.starts_with(prefix) {
                    counts[i] += 1;
                }
            }
        }
        let (index, count) = counts.iter().enumerate().max_by_key(|&(_, count)| *count)?;
        (*count > 0).then(|| Self::ALL[index])
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EngineKind {
    type Err = EngineKindError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text.trim())
            .ok_or_else(|| EngineKindError(text.to_string()))
    }
}
