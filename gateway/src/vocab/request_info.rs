//! The facts of a request every layer below the parse layer reads: [`RequestInfo`].

use std::sync::Arc;
use std::time::Instant;

use super::Priority;

/// Facts about a request, set once by the parse layer and read by every layer after it;
/// never changed after (what the answer used comes back with its body: see
/// [`Report`](super::Report)).
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// The served model name (a LoRA adapter's parent model for a request naming one).
    pub model: String,
    /// The LoRA adapter the request names, served by `model`'s replicas.
    pub adapter: Option<String>,
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

/// Shared handle to a request's facts (see [`Parsed`](crate::request::Parsed)).
pub type Info = Arc<RequestInfo>;
