//! Splits generated text, as it arrives, into reasoning and content deltas, and counts the
//! tokens that were reasoning. A marker split across deltas is held back until it is whole
//! (or proves not to be one), so the deltas add up to the same split whatever the chunking.
//!
//! An output cut inside the reasoning (by `max_tokens`, a stop string, or a model that never
//! closes it) keeps what it streamed as reasoning: a stream cannot take deltas back, and the
//! whole answer is built the same way, so streamed and whole answers agree.

use super::ReasoningParser;
use super::parser::{THINK_CLOSE, THINK_OPEN};

/// What one push adds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReasoningSplit {
    pub reasoning: String,
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the output shows whether it opens with `<think>`.
    Start,
    Reasoning,
    /// After the reasoning (or with none): everything is content.
    Content,
}

/// The reasoning state of one choice.
#[derive(Debug, Clone)]
pub struct ReasoningStreamer {
    parser: ReasoningParser,
    phase: Phase,
    /// Text not yet sent: a possible marker prefix (or, at the start, a possible `<think>`).
    held: String,
    reasoning_tokens: usize,
    /// Tokens seen in [`Phase::Start`]: reasoning if the output turns out to open inside it.
    start_tokens: usize,
}

impl ReasoningStreamer {
    /// A streamer for `parser`'s syntax.
    pub fn new(parser: ReasoningParser) -> Self {
        Self {
            parser,
            phase: Phase::Start,
            held: String::new(),
            reasoning_tokens: 0,
            start_tokens: 0,
        }
    }

    /// Counts one generated token, before its text is pushed: reasoning when it arrives
    /// inside the reasoning (the one that closes it included).
    pub fn count_token(&mut self) {
        match self.phase {
            Phase::Start => self.start_tokens += 1,
            Phase::Reasoning => self.reasoning_tokens += 1,
            Phase::Content => {}
        }
    }

    /// Adds generated text.
    pub fn push(&mut self, text: &str) -> ReasoningSplit {
        self.held.push_str(text);
        let mut out = ReasoningSplit::default();
        self.advance(&mut out, false);
        out
    }

    /// The output is final: what was held back is sent as what it was inside.
    pub fn finish(&mut self) -> ReasoningSplit {
        let mut out = ReasoningSplit::default();
        self.advance(&mut out, true);
        out
    }

    /// Generated tokens that were reasoning so far.
    pub fn reasoning_tokens(&self) -> usize {
        self.reasoning_tokens
    }

    /// Moves through the phases as far as the held text allows.
    fn advance(&mut self, out: &mut ReasoningSplit, done: bool) {
        if self.phase == Phase::Start {
            if let Some(rest) = self.held.strip_prefix(THINK_OPEN) {
                self.held = rest.to_string();
                self.enter(Phase::Reasoning);
            } else if THINK_OPEN.starts_with(self.held.as_str()) && !done {
                return;
            } else if self.parser.starts_inside() {
                self.enter(Phase::Reasoning);
            } else {
                self.enter(Phase::Content);
            }
        }
        if self.phase == Phase::Reasoning {
            if let Some(at) = self.held.find(THINK_CLOSE) {
                out.reasoning.push_str(&self.held[..at]);
                self.held.drain(..at + THINK_CLOSE.len());
                self.phase = Phase::Content;
            } else {
                let keep = if done {
                    0
                } else {
                    marker_prefix_len(&self.held)
                };
                let send = self.held.len() - keep;
                out.reasoning.push_str(&self.held[..send]);
                self.held.drain(..send);
                return;
            }
        }
        out.content.push_str(&self.held);
        self.held.clear();
    }

    /// Leaves the start; its tokens count as reasoning if the output began inside it.
    fn enter(&mut self, phase: Phase) {
        if phase == Phase::Reasoning {
            self.reasoning_tokens += self.start_tokens;
        }
        self.start_tokens = 0;
        self.phase = phase;
    }
}

/// Length of the longest end of `text` that begins `</think>` (held back: the marker may be
/// completed by the next delta).
fn marker_prefix_len(text: &str) -> usize {
    (1..THINK_CLOSE.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && text.ends_with(&THINK_CLOSE[..n]))
        .unwrap_or(0)
}
