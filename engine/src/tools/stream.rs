//! Turns generated text, as it arrives, into OpenAI's deltas: content, then tool calls, each
//! sent whole once its JSON closes (a first delta with its id and name, a second with all its
//! arguments). The whole text is re-parsed on each push and compared with what was sent, so a
//! response built from the deltas is the same whether it was streamed or not.
//!
//! A call is never sent before it is complete, so a call cut by `max_tokens` (or by a stop
//! string, or by a model that stops mid-call) is never returned as a tool call with arguments
//! that do not parse, streamed or not: the answer then carries the calls that did complete
//! (none, if the cut one was the first), the content written before the first call, and the
//! finish reason of the cut (`length`). The cut call's text is dropped, not sent as content:
//! it is call syntax, not an answer. Streaming OpenAI's way (arguments piece by piece) would
//! send pieces of a call that may never complete and cannot be taken back; here a client sees
//! a call's deltas only when the call is whole, later but never wrong.

use tokenscale_common::openai::{FunctionCallDelta, TOOL_TYPE_FUNCTION, ToolCallDelta};

use super::ToolParser;

/// What one push adds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamOut {
    pub content: String,
    pub tool_calls: Vec<ToolCallDelta>,
}

/// The tool-call state of one choice.
#[derive(Debug, Clone)]
pub struct ToolCallStreamer {
    parser: ToolParser,
    /// One call per message when false.
    parallel: bool,
    text: String,
    /// Bytes of content sent (content that is only whitespace waits: a message that turns
    /// out to be only calls has no content).
    content_sent: usize,
    /// The ids of the calls sent, in order.
    sent_calls: Vec<String>,
    /// Length of the ids this family's templates expect.
    id_len: usize,
}

impl ToolCallStreamer {
    /// A streamer for `parser`'s syntax.
    pub fn new(parser: ToolParser, parallel: bool) -> Self {
        Self {
            parser,
            parallel,
            text: String::new(),
            content_sent: 0,
            sent_calls: Vec::new(),
            // Mistral's templates refuse ids that are not 9 alphanumerics.
            id_len: if parser == ToolParser::Mistral { 9 } else { 24 },
        }
    }

    /// Adds generated text.
    pub fn push(&mut self, text: &str) -> StreamOut {
        self.text.push_str(text);
        self.emit(false)
    }

    /// The output is final: everything held back is decided.
    pub fn finish(&mut self) -> StreamOut {
        self.emit(true)
    }

    /// Whether any (complete) call was sent.
    pub fn has_calls(&self) -> bool {
        !self.sent_calls.is_empty()
    }

    /// With `parallel_tool_calls: false`, whether the one call allowed is complete (the
    /// generation can stop).
    pub fn first_call_done(&self) -> bool {
        !self.parallel
            && self
                .parser
                .parse(&self.text, false)
                .calls
                .first()
                .is_some_and(|c| c.complete)
    }

    fn emit(&mut self, done: bool) -> StreamOut {
        let parsed = self.parser.parse(&self.text, done);
        let mut out = StreamOut::default();
        let content = &self.text[..parsed.content_end.max(self.content_sent)];
        let pending = &content[self.content_sent..];
        let only_space = content.trim().is_empty();
        let send_content = !only_space || (done && parsed.calls.is_empty());
        if send_content && !pending.is_empty() {
            out.content = pending.to_string();
            self.content_sent = parsed.content_end;
        }
        let limit = if self.parallel { usize::MAX } else { 1 };
        let new_calls = parsed.calls.iter().take(limit).skip(self.sent_calls.len());
        for call in new_calls {
            // Calls complete in order: one still open holds back those after it.
            let (true, Some(name)) = (call.complete, &call.name) else {
                break;
            };
            let index = self.sent_calls.len() as u32;
            let id = call_id(self.id_len);
            // OpenAI's shape: the call's first delta has its id, type and name, and empty
            // arguments; its arguments follow.
            out.tool_calls.push(ToolCallDelta {
                index,
                id: Some(id.clone()),
                kind: Some(TOOL_TYPE_FUNCTION.to_string()),
                function: Some(FunctionCallDelta {
                    name: Some(name.clone()),
                    arguments: Some(String::new()),
                }),
            });
            out.tool_calls.push(ToolCallDelta {
                index,
                id: None,
                kind: None,
                function: Some(FunctionCallDelta {
                    name: None,
                    arguments: Some(call.arguments.clone()),
                }),
            });
            self.sent_calls.push(id);
        }
        out
    }
}

/// A process-unique call id: `call_` then alphanumerics (`len` of them for Mistral's 9).
fn call_id(len: usize) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos
        ^ NEXT
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut id = String::with_capacity(len);
    for _ in 0..len {
        // SplitMix64 steps: each character from fresh bits.
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        id.push(ALPHABET[((z ^ (z >> 31)) % ALPHABET.len() as u64) as usize] as char);
    }
    if len == 9 { id } else { format!("call_{id}") }
}
