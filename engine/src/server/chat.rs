//! `POST /v1/chat/completions`: messages (and tools) rendered with the model's chat template,
//! then generated like a completion, whole or streamed, under the request's grammar if any;
//! tool calls are parsed out of the text into `tool_calls`.

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
use super::lora::response_model;
use super::params::{Resolved, resolve};
use super::state::{AppState, LoadedModel};
use super::{ApiError, fields, structured};
use crate::grammar::ReasoningGate;
use crate::reasoning::{ReasoningParser, ReasoningStreamer, THINK_CLOSE, THINK_OPEN};
use crate::tokenizer::{EncodeOptions, SERVER_CONTEXT_KEYS, TemplateKwargs, Tokenizer};
use crate::tools::{ToolCallStreamer, ToolSet, template_inputs};

const ASSISTANT: &str = "assistant";
/// The request member whose keys are added to the chat template's variables (vLLM's name).
const KWARGS: &str = "chat_template_kwargs";
/// vLLM's cap on reasoning tokens, after which `</think>` is forced.
const BUDGET: &str = "thinking_token_budget";

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
    let adapter = super::lora::adapter_for(body.model.as_deref(), &state, model).await?;
    fields::check_extra(&body.extra, &["logit_bias", KWARGS, BUDGET])?;
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
    let mut resolved = resolve(
        &body.sampling,
        max_tokens,
        logprobs,
        body.extra.get("logit_bias"),
        &headers,
        model.vocab_size,
    )?;
    resolved.adapter = adapter;
    let tools = ToolSet::from_request(
        body.tools.as_deref(),
        body.tool_choice.as_ref(),
        body.parallel_tool_calls,
    )
    .map_err(|e| ApiError::invalid_param(&e.param, e.message))?;
    let prompt = render_prompt(model, &body, tools.as_ref())?;
    shape_output(model, &body, tools.as_ref(), &mut resolved).await?;
    // A chat without max_tokens may use whatever room the context leaves.
    let runners = generate::start(model, &[prompt], &resolved, None, arrival)?;
    let format = Format(ResponseHead::new(
        "chatcmpl",
        response_model(&state, &resolved),
    ));
    let choice = |c: Collected| ChatChoice {
        index: c.index,
        logprobs: logprobs.map(|_| chat_logprobs(&c.logprobs)),
        message: ChatResponseMessage {
            role: ASSISTANT.to_string(),
            // A message that is only calls (or only reasoning) has no content.
            content: (!c.text.is_empty() || (c.tool_calls.is_empty() && c.reasoning.is_empty()))
                .then_some(c.text),
            reasoning_content: (!c.reasoning.is_empty()).then_some(c.reasoning),
            tool_calls: (!c.tool_calls.is_empty()).then_some(c.tool_calls),
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

/// The prompt: the messages and the offered tools through the model's template.
fn render_prompt(
    model: &LoadedModel,
    body: &ChatCompletionRequest,
    tools: Option<&ToolSet>,
) -> Result<Vec<u32>, ApiError> {
    let template = model.tokenizer.chat_template();
    let inputs = template_inputs(
        &body.messages,
        tools,
        template.renders_tools(),
        model.tool_parser,
    )
    .map_err(|e| ApiError::invalid_param(&e.param, e.message))?;
    let kwargs = template_kwargs(body.extra.get(KWARGS))?;
    model
        .tokenizer
        .encode_chat_with_tools(&inputs.messages, inputs.tools.as_ref(), true, kwargs)
        .map_err(|e| ApiError::invalid_param("messages", e.to_string()))
}

/// The request's `chat_template_kwargs`: an object whose keys are not the server's own
/// template variables (a `null` is the same as none).
fn template_kwargs(value: Option<&serde_json::Value>) -> Result<Option<&TemplateKwargs>, ApiError> {
    let kwargs = match value {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::Object(kwargs)) => kwargs,
        Some(_) => {
            return Err(ApiError::invalid_param(
                KWARGS,
                "chat_template_kwargs must be an object",
            ));
        }
    };
    if let Some(key) = SERVER_CONTEXT_KEYS
        .iter()
        .find(|k| kwargs.contains_key(**k))
    {
        return Err(ApiError::invalid_param(
            KWARGS,
            format!(
                "chat_template_kwargs may not set {key:?}: the server sets it from the request"
            ),
        ));
    }
    Ok(Some(kwargs))
}

/// The grammar the output follows and the tool-call parsing of its text.
async fn shape_output(
    model: &LoadedModel,
    body: &ChatCompletionRequest,
    tools: Option<&ToolSet>,
    resolved: &mut Resolved,
) -> Result<(), ApiError> {
    let parser = model.tool_parser;
    let requested = structured::requested(&body.structured)?;
    let grammar = structured::for_chat(requested, tools, parser, &model.tokenizer)?;
    let reasoning = reasoning_parser(model, body);
    if let Some(parser) = reasoning {
        resolved.reasoning = Some(ReasoningStreamer::new(parser));
        // Markers that are special tokens must reach the parser as text.
        if markers_are_special(&model.tokenizer) {
            resolved.skip_special_tokens = false;
        }
    }
    if let Some(grammar) = grammar {
        if resolved.params.ignore_eos {
            return Err(ApiError::invalid_param(
                "ignore_eos",
                "ignore_eos cannot be combined with a structured output: the grammar decides where the output ends",
            ));
        }
        let constraint = structured::compile(model, grammar, tools).await?;
        resolved.constraint = Some(match reasoning {
            // The model reasons freely; the grammar shapes what follows `</think>`.
            Some(parser) => constraint.after_reasoning(reasoning_gate(model, body, parser)?),
            None => constraint,
        });
    } else if body.extra.get(BUDGET).is_some_and(|b| !b.is_null()) {
        return Err(ApiError::invalid_param(
            BUDGET,
            "thinking_token_budget applies only to a reasoning answer with a structured output or a required or named tool_choice",
        ));
    }
    if let Some(set) = tools.filter(|t| t.is_offered()) {
        resolved.tool_calls = Some(ToolCallStreamer::new(parser, set.parallel));
        // Markers that are special tokens must reach the parser as text.
        if structured::markers_are_special(&model.tokenizer, parser) {
            resolved.skip_special_tokens = false;
        }
    }
    Ok(())
}

/// The reasoning a grammar waits for: Qwen3's `<think>` forced first where the model opens
/// it itself, then free reasoning up to `</think>`, forced after `thinking_token_budget`
/// reasoning tokens.
fn reasoning_gate(
    model: &LoadedModel,
    body: &ChatCompletionRequest,
    parser: ReasoningParser,
) -> Result<ReasoningGate, ApiError> {
    let budget = match body.extra.get(BUDGET).filter(|b| !b.is_null()) {
        None => None,
        Some(value) => Some(
            value
                .as_u64()
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        BUDGET,
                        "thinking_token_budget must be a whole number >= 0",
                    )
                })?,
        ),
    };
    let encode = |marker: &str| {
        let options = EncodeOptions {
            add_bos: false,
            parse_special: true,
        };
        model
            .tokenizer
            .encode_with(marker, options)
            .map_err(|e| ApiError::internal(format!("tokenising {marker}: {e}")))
    };
    let open = if parser.starts_inside() {
        Vec::new()
    } else {
        encode(THINK_OPEN)?
    };
    Ok(ReasoningGate::new(open, encode(THINK_CLOSE)?, budget))
}

/// The model's reasoning parser, unless the request turns thinking off
/// (`chat_template_kwargs: {"enable_thinking": false}`): its output is then all answer.
fn reasoning_parser(model: &LoadedModel, body: &ChatCompletionRequest) -> Option<ReasoningParser> {
    let thinking_off = body
        .extra
        .get(KWARGS)
        .and_then(|k| k.get("enable_thinking"))
        .is_some_and(|v| v == &serde_json::Value::Bool(false));
    model.reasoning_parser.filter(|_| !thinking_off)
}

/// Whether `<think>` or `</think>` is one special token here (its text then only shows when
/// special tokens are decoded).
fn markers_are_special(tokenizer: &Tokenizer) -> bool {
    let options = EncodeOptions {
        add_bos: false,
        parse_special: true,
    };
    [THINK_OPEN, THINK_CLOSE].iter().any(|marker| {
        matches!(tokenizer.encode_with(marker, options).as_deref(), Ok(&[id]) if tokenizer.is_special(id))
    })
}

fn chat_logprobs(tokens: &[TokenLogprobs]) -> ChatLogprobs {
    let content = tokens
        .iter()
        .map(|t| ChatTokenLogprob {
            token: t.token.clone(),
            // Chat never echoes its prompt, so every token has a logprob.
            logprob: t.logprob.unwrap_or(f32::NAN),
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
            ..ChatDelta::default()
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
        if delta.text.is_empty()
            && delta.reasoning.is_empty()
            && delta.tool_calls.is_empty()
            && delta.logprobs.is_empty()
            && delta.finish.is_none()
        {
            return None;
        }
        let content = (!delta.text.is_empty()).then(|| delta.text.clone());
        let reasoning_content = (!delta.reasoning.is_empty()).then(|| delta.reasoning.clone());
        let tool_calls = (!delta.tool_calls.is_empty()).then(|| delta.tool_calls.clone());
        let logprobs = (!delta.logprobs.is_empty()).then(|| chat_logprobs(&delta.logprobs));
        let finish_reason = delta.finish.map(|f| f.reason.to_string());
        let choice = ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content,
                reasoning_content,
                tool_calls,
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
