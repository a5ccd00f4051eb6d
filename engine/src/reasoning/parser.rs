//! The reasoning syntaxes: which marker opens and closes the reasoning, and where an output
//! starts (inside the reasoning or not), per model family.

use super::UnknownParser;

/// Opens the reasoning block.
pub const THINK_OPEN: &str = "<think>";
/// Closes it; what follows is the answer.
pub const THINK_CLOSE: &str = "</think>";

/// A model family's reasoning syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningParser {
    /// Qwen3: the model opens `<think>` itself; an output that does not start with it is all
    /// content (thinking turned off, or a model that skipped it).
    Qwen3,
    /// DeepSeek-R1 (and templates that open `<think>` in the generation prompt): the output
    /// starts inside the reasoning (a leading `<think>` is dropped); text before `</think>` is
    /// reasoning, and with no `</think>` everything is.
    DeepSeekR1,
}

impl ReasoningParser {
    /// The names `--reasoning-parser` accepts (`none` turns reasoning parsing off).
    pub const NAMES: [&'static str; 3] = ["qwen3", "deepseek_r1", "none"];

    /// The parser called `name`; `None` for `none`.
    pub fn from_name(name: &str) -> Result<Option<Self>, UnknownParser> {
        match name {
            "qwen3" => Ok(Some(Self::Qwen3)),
            "deepseek_r1" => Ok(Some(Self::DeepSeekR1)),
            "none" => Ok(None),
            other => Err(UnknownParser(other.to_string())),
        }
    }

    /// The family a chat template shows, kept simple: a template that never mentions
    /// `</think>` has no reasoning (`None`); one whose generation prompt (the text after
    /// `add_generation_prompt` up to its `endif`) leaves a `<think>` open is DeepSeek-R1's (the
    /// model starts inside the reasoning: R1, QwQ, Qwen3's thinking-only releases); any other
    /// is Qwen3's (whose empty `<think>\n\n</think>` for `enable_thinking: false` closes).
    pub fn detect(template: &str) -> Option<Self> {
        if !template.contains(THINK_CLOSE) {
            return None;
        }
        let leaves_open = template
            .split("add_generation_prompt")
            .skip(1)
            .any(|after| {
                let block = &after[..after.find("endif").unwrap_or(after.len())];
                block.matches(THINK_OPEN).count() > block.matches(THINK_CLOSE).count()
            });
        Some(if leaves_open {
            Self::DeepSeekR1
        } else {
            Self::Qwen3
        })
    }

    /// The parser's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Qwen3 => "qwen3",
            Self::DeepSeekR1 => "deepseek_r1",
        }
    }

    /// Whether an output that does not open with `<think>` is reasoning (R1) or content.
    pub fn starts_inside(self) -> bool {
        self == Self::DeepSeekR1
    }
}
