//! What an answer used, as it travels back up the stack: the engine's (or the gateway's)
//! token counts and the body's [`Report`].

use std::time::Instant;

/// Token counts the engine reported in `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// All prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from the prefix cache (`prompt_tokens_details.cached_tokens`).
    pub cached_tokens: u64,
}

/// What a response body's producer learned of the answer; final once the body has ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// The tokens the answer used: the engine's `usage`, else the gateway's own count.
    pub usage: Option<Usage>,
    /// `usage` is the gateway's own count (the engine reported none).
    pub estimated: bool,
    /// When the first generated content (text, reasoning or a tool call) reached the
    /// client's stream: the time to first token as the user sees it. A chat stream's
    /// role-only first chunk leaves before prefill and does not count.
    pub first_content: Option<Instant>,
}
