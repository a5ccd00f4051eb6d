//! What the scheduler knows about a request: its tokens, how many have keys and values in the
//! cache, and its priority class.

use crate::kv::RequestId;

pub use tokenscale_common::priority::Priority;

/// One request as the scheduler sees it.
#[derive(Debug, Clone)]
pub struct SchedRequest {
    pub id: RequestId,
    pub priority: Priority,
    /// Prompt tokens followed by every token generated so far.
    pub tokens: Vec<u32>,
    pub num_prompt_tokens: usize,
    /// Tokens whose keys and values are in the cache. One counter covers chunked prefill,
    /// prefix-cache hits and recompute after preemption (it drops back to 0).
    pub num_computed_tokens: usize,
    /// Prompt tokens served from the prefix cache when the request was first scheduled.
    pub num_cached_tokens: Option<usize>,
    /// Per-tenant salt for the prefix-cache hash chain.
    pub cache_salt: Option<String>,
    /// Admission order; larger is newer. Preemption picks the newest of the lowest class.
    pub(crate) arrival_seq: u64,
    /// How many times this request was preempted.
    pub num_preemptions: u32,
    /// Every prompt position's logits are wanted (prompt logprobs): the prefix cache is not
    /// read for this request, since a cached position has no logits.
    pub prompt_logits: bool,
    /// Tokens guessed to follow `tokens` (a speculative draft), run with the next decode
    /// token and verified against its logits; empty when not speculating.
    pub draft: Vec<u32>,
}

impl SchedRequest {
    /// A new request with nothing computed yet.
    pub fn new(id: RequestId, prompt: Vec<u32>, priority: Priority, salt: Option<String>) -> Self {
        Self {
            id,
            priority,
            num_prompt_tokens: prompt.len(),
            tokens: prompt,
            num_computed_tokens: 0,
            num_cached_tokens: None,
            cache_salt: salt,
            arrival_seq: 0,
            num_preemptions: 0,
            prompt_logits: false,
            draft: Vec::new(),
        }
    }

    /// Tokens generated so far.
    pub fn output_tokens(&self) -> &[u32] {
        &self.tokens[self.num_prompt_tokens.min(self.tokens.len())..]
    }

    /// Tokens known but not yet computed.
    pub fn num_uncomputed(&self) -> usize {
        self.tokens.len().saturating_sub(self.num_computed_tokens)
    }

    /// Preemption order key: larger is preempted first (batch before interactive, then newest).
    pub(crate) fn victim_key(&self) -> (Priority, u64) {
        (self.priority, self.arrival_seq)
    }
}
