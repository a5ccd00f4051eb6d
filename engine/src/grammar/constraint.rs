//! One sequence's constraint: the grammar's state after the tokens generated so far. The
//! token the sampler picked is recorded at once but consumed by the grammar only when the next
//! mask is computed, so all of the grammar's work happens on the mask worker, beside the
//! forward pass.

use std::sync::Arc;

use llguidance::Matcher;

use super::{GateStep, GrammarError, ReasoningGate, TokenMask};

/// A grammar being followed by one sequence.
pub struct Constraint {
    matcher: Matcher,
    /// Every end-of-sequence token: a finished grammar allows any of them.
    eos_ids: Arc<[u32]>,
    vocab_size: usize,
    /// Sampled but not yet consumed by the grammar.
    pending: Option<u32>,
    /// While the reasoning goes on, the grammar waits (`None` once it applies).
    gate: Option<ReasoningGate>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("pending", &self.pending)
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

impl Clone for Constraint {
    /// An independent copy (the choices of an `n > 1` request each follow their own).
    fn clone(&self) -> Self {
        Self {
            matcher: self.matcher.deep_clone(),
            eos_ids: self.eos_ids.clone(),
            vocab_size: self.vocab_size,
            pending: self.pending,
            gate: self.gate.clone(),
        }
    }
}

impl Constraint {
    pub(super) fn new(matcher: Matcher, eos_ids: Arc<[u32]>, vocab_size: usize) -> Self {
        Self {
            matcher,
            eos_ids,
            vocab_size,
            pending: None,
            gate: None,
        }
    }

    /// This constraint applied only after the reasoning `gate` lets it (the tokens before,
    /// the reasoning and its end marker, are not the grammar's).
    pub fn after_reasoning(mut self, gate: ReasoningGate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Records the token the sampler chose; the grammar consumes it before the next mask.
    pub fn record(&mut self, token: u32) {
        self.pending = Some(token);
    }

    /// Consumes `tokens`, the start of an answer generated elsewhere (a continuation), so the
    /// grammar is where that answer left it. Runs on the caller's thread: once per request.
    pub fn advance(&mut self, tokens: &[u32]) -> Result<(), GrammarError> {
        tokens.iter().try_for_each(|&token| self.consume(token))
    }

    /// Gives `token` to the gate while the reasoning goes on, to the grammar after it.
    fn consume(&mut self, token: u32) -> Result<(), GrammarError> {
        if let Some(gate) = &mut self.gate {
            if gate.step() != GateStep::Open {
                gate.observe(token);
                return Ok(());
            }
            self.gate = None;
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| GrammarError::Runtime(format!("token {token}: {e:#}")))
    }

    /// Consumes the recorded token, then returns the tokens allowed next: what continues the
    /// grammar, plus every EOS token once the text so far is complete.
    pub fn next_mask(&mut self) -> Result<TokenMask, GrammarError> {
        if let Some(token) = self.pending.take() {
            self.consume(token)?;
        }
        match self.gate.as_ref().map(ReasoningGate::step) {
            Some(GateStep::Force(token)) => {
                return Ok(TokenMask::allowing(self.vocab_size, &[token]));
            }
            Some(GateStep::Free) => return Ok(TokenMask::all(self.vocab_size)),
            Some(GateStep::Open) => self.gate = None,
            None => {}
        }
        let vob = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError::Runtime(format!("{e:#}")))?;
        let mut words = vob.as_slice().to_vec();
        words.resize(self.vocab_size.div_ceil(32), 0);
        let mut mask = TokenMask::from_words(words);
        if self.eos_ids.iter().any(|&id| mask.allows(id)) {
            mask = self.with_every_eos(mask);
        }
        if mask.is_empty() {
            return Err(GrammarError::Runtime(
                "the grammar allows no token at this point".into(),
            ));
        }
        Ok(mask)
    }

    fn with_every_eos(&self, mask: TokenMask) -> TokenMask {
        let mut words = mask.words().to_vec();
        for &id in self.eos_ids.iter() {
            words[id as usize / 32] |= 1 << (id % 32);
        }
        TokenMask::from_words(words)
    }
}
