//! What the gateway needs to know about a request, read from a small part of its body.

mod deadline;
mod layer;
mod parse;
mod parsed;
mod rewrite;

pub use layer::{Parse, ParseLayer, ParseSettings, body_budget, body_budget_spent};
pub use parse::{PartialBody, PromptSummary, parse_body};
pub use parsed::Parsed;
pub use rewrite::{request_usage_in_stream, with_model};

use std::sync::Arc;
use std::time::Instant;

pub use tokenscale_common::priority::Priority;

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

/// Facts about a request, set once by the parse layer and read by every layer after it;
/// never changed after (what the answer used comes back with its body: see
/// [`Report`](crate::body::Report)).
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// The served model name.
    pub model: String,
    /// Whether the client asked for SSE.
    pub stream: bool,
    /// Whether the client itself asked for the usage chunk (else the gateway strips it).
    pub client_wants_usage: bool,
    /// Completion tokens reserved against the output limit: `max_tokens` (or the default)
    /// times `n`.
    pub reserved_output_tokens: u64,
    /// Prompt tokens estimated from the prompt's characters.
    pub estimated_prompt_tokens: u64,
    /// Admission priority.
    pub priority: Priority,
    /// When the request arrived at the gateway.
    pub arrival: Instant,
    /// When the request stops being worth serving if not yet admitted.
    pub deadline: Instant,
    /// Hash of the prompt's leading characters, for prefix affinity.
    pub prefix_hash: Option<u64>,
}

/// Shared handle to a request's facts (see [`Parsed`]).
pub type Info = Arc<RequestInfo>;
