//! What the gateway needs to know about a request, read from a small part of its body.

mod deadline;
mod layer;
mod parse;
mod parsed;
mod rewrite;

pub use layer::{Parse, ParseLayer, ParseSettings};
pub use parse::{PartialBody, PromptSummary, parse_body};
pub use parsed::Parsed;
pub use rewrite::request_usage_in_stream;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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
/// never changed after (what happens to the request is its [`Outcome`]).
#[derive(Debug)]
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

/// What happened to a request: one per request, made by the parse layer and handed down in
/// [`Parsed`]; written by admission (queue wait) and the proxy (usage, first content, as the
/// response streams), read by limits and metrics when the response body ends. Kept apart
/// from the facts so that what is written, and by whom, shows in the signatures.
#[derive(Debug, Default)]
pub struct Outcome {
    usage: Mutex<Option<Usage>>,
    /// The usage is the gateway's own count: the engine reported none.
    estimated: AtomicBool,
    queue_wait_us: AtomicU64,
    /// When the first generated content (text, reasoning or a tool call) reached the client's
    /// stream: the time to first token as the user sees it. A chat stream's role-only first
    /// chunk is sent before prefill and does not count.
    first_content: OnceLock<Instant>,
}

impl Outcome {
    /// Records the engine's usage.
    pub fn set_usage(&self, usage: Usage) {
        *self.usage.lock().unwrap_or_else(|p| p.into_inner()) = Some(usage);
    }

    /// Records the gateway's own count, for an answer whose engine reported no usage.
    pub fn set_estimated_usage(&self, usage: Usage) {
        let mut slot = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(usage);
            self.estimated.store(true, Ordering::Relaxed);
        }
    }

    /// True when [`Self::usage`] is the gateway's own count.
    pub fn usage_estimated(&self) -> bool {
        self.estimated.load(Ordering::Relaxed)
    }

    /// Records the time spent in the admission queue.
    pub fn set_queue_wait(&self, wait: Duration) {
        self.queue_wait_us
            .store(wait.as_micros() as u64, Ordering::Relaxed);
    }

    /// Time spent in the admission queue.
    pub fn queue_wait(&self) -> Duration {
        Duration::from_micros(self.queue_wait_us.load(Ordering::Relaxed))
    }

    /// Records that the first generated content is being sent now (later calls keep the first).
    pub fn mark_first_content(&self) {
        let _ = self.first_content.set(Instant::now());
    }

    /// When the first generated content was sent, if any was.
    pub fn first_content(&self) -> Option<Instant> {
        self.first_content.get().copied()
    }

    /// The engine's usage, if it reported one.
    pub fn usage(&self) -> Option<Usage> {
        *self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Shared handle to a request's facts (see [`Parsed`]).
pub type Info = Arc<RequestInfo>;
