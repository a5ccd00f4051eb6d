//! Reasoning: the `<think>…</think>` block a reasoning model writes before its answer, split
//! out of the generated text as it streams ([`ReasoningStreamer`]) into `reasoning_content`,
//! the rest left as the answer's content. One [`ReasoningParser`] per model family, chosen
//! from the chat template or `--reasoning-parser`.

mod parser;
mod stream;

pub use parser::{ReasoningParser, THINK_CLOSE, THINK_OPEN};
pub use stream::{ReasoningSplit, ReasoningStreamer};

/// A reasoning parser name that is not one of [`ReasoningParser::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--reasoning-parser: unknown parser {0:?}; one of qwen3, deepseek_r1, none")]
pub struct UnknownParser(pub String);

#[cfg(test)]
mod tests;
