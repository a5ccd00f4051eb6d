//! One choice of a response being generated: engine tokens in, text deltas out (incremental
//! detokenisation, stop strings held back and cut), with logprobs and the final usage.

use std::sync::Arc;

use super::ApiError;
use crate::runtime::{RequestStream, RequestUsage, TokenEvent};
use crate::sampling::{SampledToken, StopMatcher};
use crate::tokenizer::{IncrementalDecoder, Tokenizer};

/// A token's logprob entry, ready for either response shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// The token's text (invalid UTF-8 pieces replaced).
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// Alternatives, most likely first: (text, bytes, logprob).
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// How a choice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    /// `stop` or `length`.
    pub reason: &'static str,
    pub usage: RequestUsage,
}

/// What one step of a choice adds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChoiceDelta {
    /// Text now safe to send (may be empty while a character or a stop string is pending).
    pub text: String,
    pub logprobs: Vec<TokenLogprobs>,
    /// Set on the last delta.
    pub finish: Option<Finish>,
}

/// One choice in progress. Dropping it cancels its engine request.
#[derive(Debug)]
pub struct ChoiceRunner {
    /// Position in the response's `choices`.
    pub index: u32,
    stream: Option<RequestStream>,
    tokenizer: Arc<Tokenizer>,
    decoder: IncrementalDecoder,
    stop: StopMatcher,
    prompt_tokens: usize,
    num_tokens: usize,
    cached_tokens: usize,
    want_logprobs: bool,
}

impl ChoiceRunner {
    /// Follows `stream`, an engine request for a prompt of `prompt_tokens` tokens.
    pub fn new(
        index: u32,
        stream: RequestStream,
        tokenizer: Arc<Tokenizer>,
        stop: &[String],
        skip_special_tokens: bool,
        prompt_tokens: usize,
        want_logprobs: bool,
    ) -> Self {
        Self {
            index,
            stream: Some(stream),
            tokenizer,
            decoder: IncrementalDecoder::new(skip_special_tokens),
            stop: StopMatcher::new(stop),
            prompt_tokens,
            num_tokens: 0,
            cached_tokens: 0,
            want_logprobs,
        }
    }

    /// The next delta; `None` after the last one.
    pub async fn next(&mut self) -> Option<Result<ChoiceDelta, ApiError>> {
        let event = self.stream.as_mut()?.next().await;
        Some(match event {
            Some(TokenEvent::Token {
                token,
                num_cached_tokens,
            }) => self.on_token(token, num_cached_tokens),
            Some(TokenEvent::Finished { reason, usage }) => {
                self.stream = None;
                let tail = self.decoder.finish();
                let check = self.stop.push(&tail);
                let mut text = check.text;
                let reason = if check.stopped.is_some() {
                    "stop"
                } else {
                    reason.as_openai()
                };
                text.push_str(&self.stop.finish());
                Ok(ChoiceDelta {
                    text,
                    logprobs: Vec::new(),
                    finish: Some(Finish { reason, usage }),
                })
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

    fn on_token(
        &mut self,
        token: SampledToken,
        num_cached_tokens: usize,
    ) -> Result<ChoiceDelta, ApiError> {
        self.num_tokens += 1;
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
        let mut delta = ChoiceDelta {
            text: check.text,
            logprobs,
            finish: None,
        };
        if check.stopped.is_some() {
            // The handler saw the stop string: the request is complete, not cancelled.
            if let Some(stream) = self.stream.take() {
                stream.complete();
            }
            let usage = RequestUsage {
                prompt_tokens: self.prompt_tokens,
                completion_tokens: self.num_tokens,
                cached_tokens: self.cached_tokens,
            };
            delta.finish = Some(Finish {
                reason: "stop",
                usage,
            });
        }
        Ok(delta)
    }

    fn logprobs_of(&self, token: &SampledToken) -> TokenLogprobs {
        let piece = |id: u32| {
            let bytes = self.tokenizer.token_bytes(id).unwrap_or_default().to_vec();
            (String::from_utf8_lossy(&bytes).into_owned(), bytes)
        };
        let (text, bytes) = piece(token.token_id);
        let top = token
            .top_logprobs
            .iter()
            .map(|t| {
                let (text, bytes) = piece(t.token_id);
                (text, bytes, t.logprob)
            })
            .collect();
        TokenLogprobs {
            token: text,
            bytes,
            logprob: token.logprob.unwrap_or(f32::NAN),
            top,
        }
    }
}
