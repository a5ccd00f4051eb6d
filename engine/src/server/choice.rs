//! One choice of a response being generated: engine tokens in, text deltas out (incremental
//! detokenisation, stop strings held back and cut), with logprobs and the final usage.

use std::sync::Arc;

use tokenscale_common::openai::ToolCallDelta;

use super::ApiError;
use crate::reasoning::ReasoningStreamer;
use crate::runtime::{RequestStream, RequestUsage, TokenEvent};
use crate::sampling::{SampledToken, StopMatcher};
use crate::tokenizer::{IncrementalDecoder, Tokenizer};
use crate::tools::ToolCallStreamer;

/// A token's logprob entry, ready for either response shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// The token's text (invalid UTF-8 pieces replaced).
    pub token: String,
    pub bytes: Vec<u8>,
    /// `None` for the first token of an echoed prompt (no position comes before it).
    pub logprob: Option<f32>,
    /// Alternatives, most likely first: (text, bytes, logprob).
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// How a choice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    /// `stop`, `length`, or `tool_calls` (it stopped after calling tools).
    pub reason: &'static str,
    pub usage: RequestUsage,
    /// Generated tokens that were reasoning (with a reasoning parser only).
    pub reasoning_tokens: Option<usize>,
}

/// What one step of a choice adds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChoiceDelta {
    /// Text now safe to send (may be empty while a character or a stop string is pending).
    pub text: String,
    /// Reasoning now safe to send (chat with a reasoning parser).
    pub reasoning: String,
    /// Tool-call pieces (chat with tools).
    pub tool_calls: Vec<ToolCallDelta>,
    pub logprobs: Vec<TokenLogprobs>,
    /// The token this step generated (none on a last delta that only ends the choice).
    pub token_ids: Vec<u32>,
    /// Set on the last delta.
    pub finish: Option<Finish>,
}

/// One choice in progress. Dropping it cancels its engine request.
#[derive(Debug)]
pub struct ChoiceRunner {
    /// Position in the response's `choices`.
    pub index: u32,
    stream: Option<RequestStream>,
    /// A last delta decided before any engine work (a resumed answer that had already ended).
    ended: Option<ChoiceDelta>,
    tokenizer: Arc<Tokenizer>,
    decoder: IncrementalDecoder,
    stop: StopMatcher,
    prompt_tokens: usize,
    num_tokens: usize,
    cached_tokens: usize,
    want_logprobs: bool,
    /// Splits the text into content and tool calls, when the request offers tools.
    tools: Option<ToolCallStreamer>,
    /// Splits reasoning off the text first (tool calls are parsed in the content only).
    reasoning: Option<ReasoningStreamer>,
    /// The prompt to send before the completion (`echo`), until it is sent.
    echo: Option<Echo>,
}

/// What a choice echoes before its completion (the completions route's `echo`).
#[derive(Debug, Clone)]
pub struct Echo {
    /// The prompt's text.
    pub text: String,
    /// The prompt's token ids.
    pub ids: Vec<u32>,
    /// Whether the prompt tokens' logprobs come too (the engine request must have asked for
    /// them: `SamplingParams::prompt_logprobs`).
    pub logprobs: bool,
}

impl ChoiceRunner {
    /// A choice for a prompt of `prompt_tokens` tokens; it follows the engine request given to
    /// [`attach`](Self::attach).
    pub fn new(
        index: u32,
        tokenizer: Arc<Tokenizer>,
        stop: &[String],
        skip_special_tokens: bool,
        prompt_tokens: usize,
        want_logprobs: bool,
    ) -> Self {
        Self {
            index,
            stream: None,
            ended: None,
            tokenizer,
            decoder: IncrementalDecoder::new(skip_special_tokens),
            stop: StopMatcher::new(stop),
            prompt_tokens,
            num_tokens: 0,
            cached_tokens: 0,
            want_logprobs,
            tools: None,
            reasoning: None,
            echo: None,
        }
    }

    /// Sends `echo` (the prompt, with its logprobs if asked) as this choice's first delta.
    pub fn with_echo(mut self, echo: Option<Echo>) -> Self {
        self.echo = echo;
        self
    }

    /// Parses tool calls out of the text with `tools` (if any).
    pub fn with_tool_calls(mut self, tools: Option<ToolCallStreamer>) -> Self {
        self.tools = tools;
        self
    }

    /// Splits reasoning off the text with `reasoning` (if any).
    pub fn with_reasoning(mut self, reasoning: Option<ReasoningStreamer>) -> Self {
        self.reasoning = reasoning;
        self
    }

    /// `text` as reasoning, content and call deltas; `done` flushes what the parsers held
    /// back.
    fn split(&mut self, text: String, done: bool) -> (String, String, Vec<ToolCallDelta>) {
        split_text(self.reasoning.as_mut(), self.tools.as_mut(), text, done)
    }

    /// Counts a generated token as reasoning or not, before its text is split.
    fn count_token(&mut self) {
        self.num_tokens += 1;
        if let Some(parser) = &mut self.reasoning {
            parser.count_token();
        }
    }

    /// `tool_calls` instead of `stop` when the message called tools.
    fn reason(&self, reason: &'static str) -> &'static str {
        match &self.tools {
            Some(tools) if reason == "stop" && tools.has_calls() => "tool_calls",
            _ => reason,
        }
    }

    /// Follows `stream`, the engine request generating this choice.
    pub fn attach(&mut self, stream: RequestStream) {
        self.stream = Some(stream);
    }

    /// Continues an answer whose first tokens, `ids`, were generated (and their text sent) by
    /// another replica: they go through the decoder and the stop matcher as if just generated,
    /// their text unsent, so the next delta starts exactly where the client's text stops (an
    /// unfinished character or a possible stop string is held back as it was there). Returns
    /// true when the answer had already ended (a stop string, or `max_tokens` reached): the
    /// choice then only sends its last delta, and needs no engine request.
    pub fn replay(&mut self, ids: &[u32], max_tokens: u32) -> Result<bool, ApiError> {
        for &id in ids {
            self.count_token();
            let piece = self
                .decoder
                .push(&self.tokenizer, id)
                .map_err(|e| ApiError::internal(e.to_string()))?;
            let check = self.stop.push(&piece);
            // The tool-call parser follows the text the client has, so it is in the same
            // state as on the replica that sent it.
            self.split(check.text, false);
            if check.stopped.is_some() {
                // The text before the stop string went out with the chunk that matched it.
                self.ended = Some(ChoiceDelta {
                    finish: Some(self.finish_now("stop", 0)),
                    ..ChoiceDelta::default()
                });
                return Ok(true);
            }
        }
        if self.num_tokens >= max_tokens as usize {
            self.ended = Some(self.last_delta("length", self.finish_now("length", 0).usage));
            return Ok(true);
        }
        Ok(false)
    }

    /// The next delta; `None` after the last one.
    pub async fn next(&mut self) -> Option<Result<ChoiceDelta, ApiError>> {
        if let Some(echo) = self.echo.take() {
            return Some(self.echo_delta(echo).await);
        }
        if let Some(ended) = self.ended.take() {
            return Some(Ok(ended));
        }
        let event = self.stream.as_mut()?.next().await;
        Some(match event {
            Some(TokenEvent::PromptLogprobs(_)) => Err(ApiError::internal(
                "prompt logprobs arrived that no echo asked for",
            )),
            Some(TokenEvent::Token {
                token,
                num_cached_tokens,
            }) => self.on_token(token, num_cached_tokens),
            Some(TokenEvent::Finished { reason, usage }) => {
                self.stream = None;
                Ok(self.last_delta(reason.as_openai(), usage))
            }
            Some(TokenEvent::Failed(message)) => {
                self.stream = None;
                Err(ApiError::internal(message))
            }
            None => {
                self.stream = None;
                Err(ApiError::unavailable(
                    "the engine stopped before the request finished",
                ))
            }
        })
    }

    /// The echoed prompt: its text, and its tokens' logprobs (the first one `null`) once the
    /// engine has scored them.
    async fn echo_delta(&mut self, echo: Echo) -> Result<ChoiceDelta, ApiError> {
        let mut delta = ChoiceDelta {
            text: echo.text,
            ..ChoiceDelta::default()
        };
        if !echo.logprobs {
            return Ok(delta);
        }
        let scored = match self.stream.as_mut() {
            Some(stream) => stream.next().await,
            None => None,
        };
        let scored = match scored {
            Some(TokenEvent::PromptLogprobs(scored)) => scored,
            Some(TokenEvent::Failed(message)) => return Err(ApiError::internal(message)),
            _ => return Err(ApiError::internal("the prompt logprobs did not arrive")),
        };
        let first = echo.ids.first().map(|&id| {
            let (token, bytes) = self.piece(id);
            TokenLogprobs {
                token,
                bytes,
                logprob: None,
                top: Vec::new(),
            }
        });
        delta.logprobs = first
            .into_iter()
            .chain(scored.iter().map(|t| self.logprobs_of(t)))
            .collect();
        Ok(delta)
    }

    /// The delta ending the choice for `reason`: what the decoder and the stop matcher still
    /// hold is released (or cut at a stop string it completes).
    fn last_delta(&mut self, reason: &'static str, usage: RequestUsage) -> ChoiceDelta {
        let tail = self.decoder.finish();
        let check = self.stop.push(&tail);
        let mut text = check.text;
        let reason = if check.stopped.is_some() {
            "stop"
        } else {
            reason
        };
        text.push_str(&self.stop.finish());
        let (reasoning, text, tool_calls) = self.split(text, true);
        ChoiceDelta {
            text,
            reasoning,
            tool_calls,
            finish: Some(Finish {
                reason: self.reason(reason),
                usage,
                reasoning_tokens: self.reasoning_tokens(),
            }),
            ..ChoiceDelta::default()
        }
    }

    /// The finish for `reason` from this choice's own counts.
    fn finish_now(&self, reason: &'static str, cached_tokens: usize) -> Finish {
        let usage = RequestUsage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.num_tokens,
            cached_tokens: cached_tokens.min(self.prompt_tokens),
        };
        Finish {
            reason,
            usage,
            reasoning_tokens: self.reasoning_tokens(),
        }
    }

    fn reasoning_tokens(&self) -> Option<usize> {
        self.reasoning
            .as_ref()
            .map(ReasoningStreamer::reasoning_tokens)
    }

    fn on_token(
        &mut self,
        token: SampledToken,
        num_cached_tokens: usize,
    ) -> Result<ChoiceDelta, ApiError> {
        self.count_token();
        self.cached_tokens = num_cached_tokens;
        let piece = self
            .decoder
            .push(&self.tokenizer, token.token_id)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let check = self.stop.push(&piece);
        let logprobs = if self.want_logprobs {
            vec![self.logprobs_of(&token)]
        } else {
            Vec::new()
        };
        // With parallel calls off, the one call allowed ends the message like a stop string.
        let stopped = check.stopped.is_some();
        let (reasoning, text, tool_calls) = self.split(check.text, stopped);
        let one_call_done = self.tools.as_ref().is_some_and(|t| t.first_call_done());
        let (reasoning, text, tool_calls) = if one_call_done && !stopped {
            let (more_reasoning, more_text, more_calls) = self.split(String::new(), true);
            (
                reasoning + &more_reasoning,
                text + &more_text,
                [tool_calls, more_calls].concat(),
            )
        } else {
            (reasoning, text, tool_calls)
        };
        let mut delta = ChoiceDelta {
            text,
            reasoning,
            tool_calls,
            logprobs,
            token_ids: vec![token.token_id],
            finish: None,
        };
        if stopped || one_call_done {
            // The handler saw the stop string: the request is complete, not cancelled.
            if let Some(stream) = self.stream.take() {
                stream.complete();
            }
            delta.finish = Some(self.finish_now(self.reason("stop"), self.cached_tokens));
        }
        Ok(delta)
    }

    /// A token's text (invalid UTF-8 replaced) and bytes.
    fn piece(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.tokenizer.token_bytes(id).unwrap_or_default().to_vec();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }

    fn logprobs_of(&self, token: &SampledToken) -> TokenLogprobs {
        let (text, bytes) = self.piece(token.token_id);
        let top = token
            .top_logprobs
            .iter()
            .map(|t| {
                let (text, bytes) = self.piece(t.token_id);
                (text, bytes, t.logprob)
            })
            .collect();
        TokenLogprobs {
            token: text,
            bytes,
            logprob: Some(token.logprob.unwrap_or(f32::NAN)),
            top,
        }
    }
}

/// `text` split by the choice's parsers: the reasoning first, then tool calls out of the
/// content only (a call written while thinking is not a call); `done` flushes what they held
/// back. Returns (reasoning, content, call deltas).
fn split_text(
    reasoning: Option<&mut ReasoningStreamer>,
    tools: Option<&mut ToolCallStreamer>,
    text: String,
    done: bool,
) -> (String, String, Vec<ToolCallDelta>) {
    let (reasoning, text) = match reasoning {
        Some(parser) => {
            let mut out = parser.push(&text);
            if done {
                let tail = parser.finish();
                out.reasoning.push_str(&tail.reasoning);
                out.content.push_str(&tail.content);
            }
            (out.reasoning, out.content)
        }
        None => (String::new(), text),
    };
    let Some(tools) = tools else {
        return (reasoning, text, Vec::new());
    };
    let mut out = tools.push(&text);
    if done {
        let tail = tools.finish();
        out.content.push_str(&tail.content);
        out.tool_calls.extend(tail.tool_calls);
    }
    (reasoning, out.content, out.tool_calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reasoning::ReasoningParser;
    use crate::tools::ToolParser;

    #[test]
    fn tool_calls_are_parsed_in_the_content_only() {
        let call = r#"<tool_call>{"name": "f", "arguments": {}}</tool_call>"#;
        let text = format!("<think>maybe {call}</think>{call}");
        let mut reasoning = ReasoningStreamer::new(ReasoningParser::Qwen3);
        let mut tools = ToolCallStreamer::new(ToolParser::Hermes, true);
        let (mut thought, mut content, mut calls) = (String::new(), String::new(), Vec::new());
        let chars: Vec<char> = text.chars().collect();
        for (i, piece) in chars.chunks(3).enumerate() {
            let done = (i + 1) * 3 >= chars.len();
            let piece = piece.iter().collect();
            let (r, c, t) = split_text(Some(&mut reasoning), Some(&mut tools), piece, done);
            thought.push_str(&r);
            content.push_str(&c);
            calls.extend(t);
        }
        assert_eq!(
            thought,
            format!("maybe {call}"),
            "the call while thinking stays reasoning"
        );
        assert_eq!(content, "");
        let names: Vec<_> = calls
            .iter()
            .filter_map(|d| d.function.as_ref()?.name.clone())
            .collect();
        assert_eq!(names, ["f"], "the call after the reasoning is the one call");
    }
}
