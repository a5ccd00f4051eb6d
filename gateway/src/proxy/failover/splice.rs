//! The splice (pure: no I/O, no clock): the client's stream, made of one upstream stream or,
//! after breaks, of its continuations on other replicas. It reads every event once: records
//! what the client has been sent (token ids, text, whether the answer finished, its usage),
//! strips the engine's token ids, gives continuation chunks the client's `id` and `created`,
//! drops what a continuation repeats (a chat role chunk, anything after a finished answer's
//! last chunk) and, when a stream breaks, says whether and how the answer can go on.

use bytes::Bytes;

use super::chunk::{self, Edit, Head, IdSource};
use super::reshape::Reshape;
use crate::vocab::Usage;

/// How an answer is continued on another replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continuation {
    /// Nothing of the answer reached the client yet: the request runs again as it was.
    Restart,
    /// The prompt plus the generated token ids, exactly: `tokenscale_resume` on tokenscale's
    /// engine, a token-id prompt on vLLM and llama-server.
    Exact,
    /// Other engines: the prompt plus the text sent, where their API allows it.
    Textual,
}

impl Continuation {
    /// Label value on the interruption metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Restart => "restart",
            Self::Exact => "exact",
            Self::Textual => "textual",
        }
    }
}

/// What to do with one upstream event.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Send these bytes to the client.
    Forward(Bytes),
    /// Send nothing.
    Skip,
    /// The upstream reported a failure in-band: continue elsewhere if possible, else send
    /// the event as it came.
    Broken,
}

/// What to do when the upstream stream broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The answer is complete: end the client's stream (`[DONE]`).
    End,
    /// Continue on another replica.
    Resume(Continuation),
    /// The answer cannot go on: tell the client in-band, and why.
    Fail(&'static str),
}

/// The state of one client stream.
#[derive(Debug)]
pub struct Splice {
    /// The client did not ask for the usage chunk (the gateway did, for itself).
    strip_usage: bool,
    /// `id` and `created` of the first chunk the client got.
    head: Option<Head>,
    /// How the current upstream stream continues the answer (`None`: it is the first).
    current: Option<Continuation>,
    /// Token ids of the answer sent so far, when the engine reports them.
    token_ids: Vec<u32>,
    /// Every choice chunk so far carried token ids.
    all_ids: bool,
    /// `token_ids` up to the last chunk whose text (or reasoning, or tool call) the client
    /// got: vLLM and llama-server send a token's id before the text they hold back (an
    /// unfinished character, a possible stop string, a reasoning marker their parser keeps),
    /// so the ids after it are generated again rather than continued from.
    visible_ids: usize,
    /// Text of the answer sent so far.
    text: String,
    /// Chunks with text sent so far (the token count of a textual continuation: engines
    /// stream a token a chunk, or more when they hold text back).
    text_chunks: u64,
    /// `text_chunks` when the current (textual) continuation started: its `usage` counts those
    /// tokens as prompt, the client's as completion.
    moved_tokens: u64,
    /// A choice chunk reached the client.
    started: bool,
    /// Generated content (text, reasoning or a tool call) reached the client.
    content: bool,
    /// The answer's last chunk (with `finish_reason`) reached the client.
    finished: bool,
    usage: Option<Usage>,
    /// `[DONE]` reached the client.
    done: bool,
    /// Why the answer could not be continued, once that is known.
    unresumable: Option<&'static str>,
    /// What the request asks, as far as continuing it goes.
    shape: Shape,
    /// The engine extension the first stream's token ids came in.
    ids_from: Option<IdSource>,
    /// vLLM's prompt token ids, from the first stream.
    prompt_ids: Option<Vec<u32>>,
    /// Token ids received from the current upstream stream.
    stream_ids: u64,
    /// The delta member of the answer's reasoning, while no content followed it yet.
    reasoning: Option<&'static str>,
    /// The current stream is a chat continued on `/v1/completions`: its chunks are rewritten.
    reshape: Option<Reshape>,
}

/// What a request asks, as far as continuing it goes (read from its body).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// A chat (else a completion).
    pub chat: bool,
    /// A chat that offers tools or asks for a response format or logprobs (only the chat
    /// endpoint's parsers write such an answer), or a completion that echoes its prompt: not
    /// continued from a token-id prompt.
    pub parsed: bool,
    /// The client asked for the engine's token ids itself: they reach it.
    pub keeps_ids: bool,
}

impl Splice {
    /// A stream whose client did (`client_wants_usage`) or did not ask for the usage chunk.
    pub fn new(client_wants_usage: bool) -> Self {
        Self {
            strip_usage: !client_wants_usage,
            head: None,
            current: None,
            token_ids: Vec::new(),
            all_ids: true,
            visible_ids: 0,
            text: String::new(),
            text_chunks: 0,
            moved_tokens: 0,
            started: false,
            content: false,
            finished: false,
            usage: None,
            done: false,
            unresumable: None,
            shape: Shape::default(),
            ids_from: None,
            prompt_ids: None,
            stream_ids: 0,
            reasoning: None,
            reshape: None,
        }
    }

    /// The same, for a request of `shape`.
    pub fn with_shape(mut self, shape: Shape) -> Self {
        self.shape = shape;
        self
    }

    /// Reads one upstream event (`whole`, its blank line included; `text_len` bytes of text
    /// before it). Returns what to send and the usage it reported (for the limiter and the
    /// metrics: the whole answer's, corrected after a textual continuation).
    pub fn event(&mut self, whole: &Bytes, text_len: usize) -> (Step, Option<Usage>) {
        if let Some(reshape) = &mut self.reshape
            && let Some(payload) = data_payload(&whole[..text_len.min(whole.len())])
            && let Some(json) = reshape.chat_chunk(payload)
        {
            let (event, len) = data_event(&json, &whole[text_len..]);
            return self.read(&event, len);
        }
        self.read(whole, text_len)
    }

    fn read(&mut self, whole: &Bytes, text_len: usize) -> (Step, Option<Usage>) {
        let text = &whole[..text_len.min(whole.len())];
        let Some(payload) = data_payload(text) else {
            return (Step::Forward(whole.clone()), None);
        };
        if payload == b"[DONE]" {
            self.done = true;
            return (Step::Forward(whole.clone()), None);
        }
        let Some(view) = chunk::parse(payload) else {
            return (Step::Forward(whole.clone()), None);
        };
        if view.error {
            return (Step::Broken, None);
        }
        if self.current.is_none() && view.prompt_token_ids.is_some() {
            self.prompt_ids.clone_from(&view.prompt_token_ids);
        }
        if !view.choices.is_empty() && !self.takes_choices(&view) {
            return (Step::Skip, None);
        }
        let usage = view.usage.map(|u| self.whole_answer_usage(u));
        if usage.is_some() {
            self.usage = usage;
        }
        if view.choices.is_empty() && usage.is_some() && self.strip_usage {
            return (Step::Skip, usage);
        }
        if self.head.is_none() {
            self.head = chunk::head(payload);
        }
        // Some engines (SGLang 0.4) put the usage the gateway asked for in the last chunk
        // with choices: a client that did not ask gets `"usage": null` there, as the engine
        // would have sent it.
        let hide_usage = self.strip_usage && usage.is_some();
        let edit = Edit {
            strip_ids: self.strip_ids(&view),
            head: self.head.as_ref().filter(|_| self.current.is_some()),
            usage: usage.filter(|_| self.moved_tokens > 0 && !hide_usage),
            hide_usage,
        };
        if edit.is_empty() {
            return (Step::Forward(whole.clone()), usage);
        }
        let Some(json) = chunk::rewrite(payload, &edit) else {
            return (Step::Forward(whole.clone()), usage);
        };
        (
            Step::Forward(data_event(&json, &whole[text_len..]).0),
            usage,
        )
    }

    /// Reads a chunk's choices; false when the chunk goes no further: a continuation of an
    /// answer already complete (sent again for its usage), or its repeated chat role chunk.
    fn takes_choices(&mut self, view: &chunk::ChunkView<'_>) -> bool {
        if self.finished {
            return false;
        }
        // A chat stream's first chunk names the role and carries no token.
        let role_only = view
            .choices
            .iter()
            .all(|c| c.role && !c.has_text() && !c.reasoning && !c.finish);
        if !role_only {
            self.read_choices(view);
        }
        !role_only || self.current.is_none()
    }

    /// The token-id members to take out of a chunk: those the gateway asked for.
    fn strip_ids(&self, view: &chunk::ChunkView<'_>) -> Option<IdSource> {
        let source = view
            .ids_from
            .or(view.prompt_token_ids.as_ref().map(|_| IdSource::Vllm));
        source.filter(|s| *s == IdSource::Tokenscale || !self.shape.keeps_ids)
    }

    fn read_choices(&mut self, view: &chunk::ChunkView<'_>) {
        self.started = true;
        self.all_ids &= view.token_ids.is_some();
        if self.current.is_none() {
            self.ids_from = self.ids_from.or(view.ids_from);
        }
        if let Some(ids) = &view.token_ids {
            self.token_ids.extend_from_slice(ids);
            self.stream_ids += ids.len() as u64;
        }
        // llama-server sends no chunk for a token whose text it holds back (an unfinished
        // character): its id is then missing, and the ids no longer make the answer.
        if view.predicted.is_some_and(|n| n != self.stream_ids) {
            self.all_ids = false;
        }
        let visible = view
            .choices
            .iter()
            .any(|c| c.reasoning || c.tool_calls || c.has_text());
        if visible {
            self.visible_ids = self.token_ids.len();
        }
        for choice in &view.choices {
            if choice.index != 0 {
                self.unresumable = Some("the stream has several choices");
            }
            // Reasoning is generated text the user sees too: it starts the answer.
            self.content |= choice.reasoning;
            if let (Some(member), false) = (choice.reasoning_member, self.text_chunks > 0) {
                self.reasoning = Some(member);
            }
            if choice.tool_calls {
                self.content = true;
                self.unresumable = Some("the answer has tool calls");
            }
            if let Some(text) = choice.text.as_deref().filter(|t| !t.is_empty()) {
                self.reasoning = None;
                self.text.push_str(text);
                self.text_chunks += 1;
                self.content = true;
            }
            self.finished |= choice.finish;
        }
    }

    /// A textual continuation's engine counts the text it was given as prompt: the client's
    /// answer counts it as completion.
    fn whole_answer_usage(&self, usage: Usage) -> Usage {
        let moved = self.moved_tokens;
        Usage {
            prompt_tokens: usage.prompt_tokens.saturating_sub(moved),
            completion_tokens: usage.completion_tokens + moved,
            cached_tokens: usage
                .cached_tokens
                .min(usage.prompt_tokens.saturating_sub(moved)),
        }
    }

    /// After the upstream stream broke: end, continue (and how), or fail. `textual_ok`:
    /// whether the request's shape allows a textual continuation.
    pub fn plan(&self, textual_ok: bool) -> Plan {
        if self.done || (self.finished && (self.usage.is_some() || self.strip_usage)) {
            return Plan::End;
        }
        if let Some(why) = self.unresumable {
            return Plan::Fail(why);
        }
        // A vLLM chat that sent nothing the user sees (a reasoning model's `<think>` token)
        // runs again: where its reasoning would go is not known yet.
        let unseen_chat = self.shape.chat && !self.content && self.ids_from == Some(IdSource::Vllm);
        if !self.started || unseen_chat {
            return Plan::Resume(Continuation::Restart);
        }
        if self.all_ids && self.exact_ok() {
            return Plan::Resume(Continuation::Exact);
        }
        if self.finished {
            // Complete but for its usage, which no other engine can be asked for.
            return Plan::End;
        }
        if textual_ok {
            Plan::Resume(Continuation::Textual)
        } else {
            Plan::Fail(
                "the engine reports no token ids and the request cannot be continued as text",
            )
        }
    }

    /// Whether the ids received can continue the answer exactly: tokenscale's engine takes
    /// them as they are; other engines take a token-id prompt, which needs a completion, or
    /// a chat whose rendered prompt vLLM reported and whose answer no chat parser but the
    /// reasoning one writes.
    fn exact_ok(&self) -> bool {
        match self.ids_from {
            Some(IdSource::Tokenscale) | None => true,
            Some(IdSource::Vllm) => self.prompt_ids.is_some() && !self.shape.parsed,
            Some(IdSource::Llamacpp) => !self.shape.chat && !self.shape.parsed,
        }
    }

    /// A continuation of kind `how` now feeds the stream.
    pub fn resumed(&mut self, how: Continuation) {
        self.current = Some(how);
        self.stream_ids = 0;
        self.reshape = None;
        match how {
            Continuation::Textual => self.moved_tokens = self.text_chunks,
            // The continuation's engine counts the answer so far as prompt.
            Continuation::Exact if self.ids_from.is_some_and(|s| s != IdSource::Tokenscale) => {
                self.token_ids.truncate(self.visible_ids);
                self.moved_tokens = self.visible_ids as u64;
                if self.shape.chat {
                    self.reshape = Some(Reshape::new(self.reasoning));
                }
            }
            _ => {}
        }
    }

    /// The engine extension the answer's token ids came in.
    pub fn ids_from(&self) -> Option<IdSource> {
        self.ids_from
    }

    /// vLLM's prompt token ids of the answer, when it reported them.
    pub fn prompt_ids(&self) -> Option<&[u32]> {
        self.prompt_ids.as_deref()
    }

    /// Token ids of the answer sent so far.
    pub fn token_ids(&self) -> &[u32] {
        &self.token_ids
    }

    /// The token ids a continuation starts from: all of them for tokenscale's engine (its ids
    /// come with their text), those of the text the client got for other engines.
    pub fn resume_ids(&self) -> &[u32] {
        match self.ids_from {
            Some(IdSource::Vllm | IdSource::Llamacpp) => &self.token_ids[..self.visible_ids],
            _ => &self.token_ids,
        }
    }

    /// Text of the answer sent so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Text chunks sent so far (tokens, as a textual continuation counts them).
    pub fn text_chunks(&self) -> u64 {
        self.text_chunks
    }

    /// Whether generated content (text, reasoning or a tool call; not a role-only chunk) was
    /// sent.
    pub fn has_content(&self) -> bool {
        self.content
    }

    /// Whether `[DONE]` was sent.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// The event `data: {json}` followed by `tail` (its blank line), and the length of its text.
fn data_event(json: &[u8], tail: &[u8]) -> (Bytes, usize) {
    let mut out = Vec::with_capacity(json.len() + 8 + tail.len());
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    let len = out.len();
    out.extend_from_slice(tail);
    (Bytes::from(out), len)
}

/// The payload of an event made of one `data:` line (the shape every OpenAI-style server
/// sends); `None` for anything else (comments, named events), which passes unread.
fn data_payload(text: &[u8]) -> Option<&[u8]> {
    let rest = text.strip_prefix(b"data:")?;
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    (!rest.contains(&b'\n') && !rest.contains(&b'\r')).then_some(rest)
}

#[cfg(test)]
// The path is spelled out so that the fuzz target including this file finds it too.
#[path = "splice/tests.rs"]
mod tests;
#[cfg(test)]
#[path = "splice/vllm_tests.rs"]
mod vllm_tests;
