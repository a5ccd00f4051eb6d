//! What an answer used, as it travels back up the stack: the engine's (or the gateway's)
//! token counts and the body's [`Report`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::KeyRefused;

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
/// Besides what the answer used, the facts that travel back up from the layer that learned
/// them to the layers above: how long the request queued, the replica that answered, a
/// refused key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The tokens the answer used: the engine's `usage`, else the gateway's own count.
    pub usage: Option<Usage>,
    /// `usage` is the gateway's own count (the engine reported none).
    pub estimated: bool,
    /// When the first generated content (text, reasoning or a tool call) reached the
    /// client's stream: the time to first token as the user sees it. A chat stream's
    /// role-only first chunk leaves before prefill and does not count.
    pub first_content: Option<Instant>,
    /// How long the request waited in its model's admission queue; `None`: it did not wait
    /// (the metrics layer counts that as zero).
    pub queue_wait: Option<Duration>,
    /// The replica that answered a stream (its URL), named by the upstream call: failover
    /// continues a broken stream elsewhere. (`x-tokenscale-upstream` says the same to the
    /// client, but a URL that is no valid header value would be missing there.) A whole
    /// answer names none: it is never continued, and a failed attempt names its replica in
    /// its error.
    pub replica: Option<Arc<str>>,
    /// The refused credentials of a 401, for the audit line the server writes with the
    /// client's address.
    pub refused: Option<Arc<KeyRefused>>,
}
