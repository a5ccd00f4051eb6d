//! `POST /v1/chat/completions`: messages rendered with the model's chat template, then
//! generated like a completion, whole or streamed.

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use tokenscale_common::openai::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatLogprobs, ChatResponseMessage, ChatTokenLogprob,
    OBJECT_CHAT_COMPLETION, OBJECT_CHAT_COMPLETION_CHUNK, TopLogprob, Usage,
};

use super::body::read_json;
use super::choice::{ChoiceDelta, TokenLogprobs};
use super::generate::{self, ChunkFormat, Collected, ResponseHead};
use super::params::resolve;
use super::state::AppState;
use super::{ApiError, check_model};
use crate::tokenizer::ChatMessage;

const ASSISTANT: &str = "assistant";

/// The handler.
pub async fn chat_completions(State(state): State<AppState>, request: Request<Body>) -> Response {
    handle(state, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn handle(state: AppState, request: Request<Body>) -> Result<Response, ApiError> {
    let arrival = Instant::now();
    let (model, in_flight) = state.admit()?;
    let (headers, body): (_, ChatCompletionRequest) =
        read_json(request, state.max_body_bytes()).await?;
    check_model(body.model.as_deref(), state.served_model_name())?;
    if body.messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "messages must hold at least one message",
        ));
    }
    let logprobs = match (body.logprobs.unwrap_or(false), body.top_logprobs) {
        (false, Some(n)) if n > 0 => {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            ));
        }
        (false, _) => None,
        (true, n) => Some(u32::try_from(n.unwrap_or(0)).map_err(|_| {
            ApiError::invalid_param("top_logprobs", "top_logprobs must be 0 to 20")
        })?),
    };
    let max_tokens = body.max_completion_tokens.or(body.sampling.max_tokens);
    let resolved = resolve(
        &body.sampling,
        max_tokens,
        logprobs,
        &headers,
        model.vocab_size,
    )?;
    let messages: Vec<ChatMessage> = body
        .messages
        .iter()
        .map(|m| {
            ChatMessage::new(
                m.role.clone(),
                m.content.as_ref().map(|c| c.text()).unwrap_or_default(),
            )
        })
        .collect();
    let prompt = model
        .tokenizer
        .encode_chat(&messages, true)
        .map_err(|e| ApiError::invalid_param("messages", e.to_string()))?;
    // A chat without max_tokens may use whatever room the context leaves.
    let runners = generate::start(model, &[prompt], &resolved, None, arrival)?;
    let format = Format(ResponseHead::new("chatcmpl", state.served_model_name()));
    let choice = |c: Collected| ChatChoice {
        index: c.index,
        logprobs: logprobs.map(|_| chat_logprobs(&c.logprobs)),
        message: ChatResponseMessage {
            role: ASSISTANT.to_string(),
            content: Some(c.text),
        },
        finish_reason: Some(c.finish.reason.to_string()),
    };
    let body = |f: &Format, choices, usage| ChatCompletionResponse {
        id: f.0.id.clone(),
        object: OBJECT_CHAT_COMPLETION.to_string(),
        created: f.0.created,
        model: f.0.model.clone(),
        choices,
        usage: Some(usage),
    };
    generate::respond(runners, format, &resolved, in_flight, choice, body).await
}

fn chat_logprobs(tokens: &[TokenLogprobs]) -> ChatLogprobs {
    let content = tokens
        .iter()
        .map(|t| ChatTokenLogprob {
            token: t.token.clone(),
            logprob: t.logprob,
            bytes: Some(t.bytes.clone()),
            top_logprobs: t
                .top
                .iter()
                .map(|(token, bytes, logprob)| TopLogprob {
                    token: token.clone(),
                    logprob: *logprob,
                    bytes: Some(bytes.clone()),
                })
                .collect(),
        })
        .collect();
    ChatLogprobs { content }
}

struct Format(ResponseHead);

impl Format {
    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> String {
        let head = &self.0;
        let chunk = ChatCompletionChunk {
            id: head.id.clone(),
            object: OBJECT_CHAT_COMPLETION_CHUNK.to_string(),
            created: head.created,
            model: head.model.clone(),
            choices,
            usage,
        };
        serde_json::to_string(&chunk).unwrap_or_default()
    }
}

impl ChunkFormat for Format {
    fn start(&self, index: u32) -> Option<String> {
        let delta = ChatDelta {
            role: Some(ASSISTANT.to_string()),
            content: Some(String::new()),
        };
        Some(self.chunk(
            vec![ChatChunkChoice {
                index,
                delta,
                logprobs: None,
                finish_reason: None,
            }],
            None,
        ))
    }

    fn delta(&self, index: u32, delta: &ChoiceDelta) -> Option<String> {
        if delta.text.is_empty() && delta.logprobs.is_empty() && delta.finish.is_none() {
            return None;
        }
        let content = (!delta.text.is_empty()).then(|| delta.text.clone());
        let logprobs = (!delta.logprobs.is_empty()).then(|| chat_logprobs(&delta.logprobs));
        let finish_reason = delta.finish.map(|f| f.reason.to_string());
        let choice = ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content,
            },
            logprobs,
            finish_reason,
        };
        Some(self.chunk(vec![choice], None))
    }

    fn usage(&self, usage: Usage) -> String {
        self.chunk(Vec::new(), Some(usage))
    }
}
