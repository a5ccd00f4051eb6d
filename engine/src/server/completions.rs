//! `POST /v1/completions`: a prompt (text or token ids, one or several) in, completions out,
//! whole or streamed.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use tokenscale_common::openai::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse,
    OBJECT_TEXT_COMPLETION, Prompt, Usage,
};

use super::body::read_json;
use super::choice::{ChoiceDelta, Echo, TokenLogprobs};
use super::generate::{self, ChunkFormat, Collected, ResponseHead};
use super::lora::response_model;
use super::params::{DEFAULT_COMPLETION_MAX_TOKENS, resolve};
use super::state::{AppState, LoadedModel};
use super::{ApiError, fields, structured};

/// The handler.
pub async fn completions(State(state): State<AppState>, request: Request<Body>) -> Response {
    handle(state, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn handle(state: AppState, request: Request<Body>) -> Result<Response, ApiError> {
    let arrival = Instant::now();
    let (model, in_flight) = state.admit()?;
    let (headers, body): (_, CompletionRequest) =
        read_json(request, state.max_body_bytes()).await?;
    let adapter = super::lora::adapter_for(body.model.as_deref(), &state, model).await?;
    fields::check_extra(&body.extra, &["logit_bias"])?;
    let echo = body.echo == Some(true);
    let logprobs = match body.logprobs {
        None => None,
        Some(n) => Some(u32::try_from(n).map_err(|_| {
            ApiError::invalid_param("logprobs", format!("logprobs must be 0 to 20, got {n}"))
        })?),
    };
    // `max_tokens: 0` with `echo` only returns the prompt (vLLM's prompt scoring).
    let score_only = echo && body.sampling.max_tokens == Some(0);
    let mut resolved = resolve(
        &body.sampling,
        body.sampling.max_tokens.filter(|_| !score_only),
        logprobs,
        body.extra.get("logit_bias"),
        &headers,
        model.vocab_size,
    )?;
    resolved.adapter = adapter;
    if echo {
        if resolved.resume.is_some() {
            return Err(ApiError::invalid_param(
                "echo",
                "echo cannot be combined with tokenscale_resume",
            ));
        }
        // The prompt's logprobs need the logits of every prompt position.
        if logprobs.is_some() && !model.scores_prompts {
            let backend = model.engine.metrics().backend();
            return Err(ApiError::invalid_param(
                "logprobs",
                format!(
                    "echo with logprobs needs prompt logprobs, which the {backend} backend does not compute yet"
                ),
            ));
        }
        resolved.params.prompt_logprobs = logprobs;
        if score_only {
            resolved.max_tokens = Some(0);
        }
    }
    if let Some(grammar) = structured::requested(&body.structured)? {
        if resolved.params.ignore_eos {
            return Err(ApiError::invalid_param(
                "ignore_eos",
                "ignore_eos cannot be combined with a structured output: the grammar decides where the output ends",
            ));
        }
        resolved.constraint = Some(structured::compile(model, grammar, None).await?);
    }
    let prompts = tokenize(&body.prompt, model)?;
    let runners = generate::start(
        model,
        &prompts,
        &resolved,
        Some(DEFAULT_COMPLETION_MAX_TOKENS),
        arrival,
    )?;
    let runners = if echo {
        let texts = prompt_texts(&body.prompt, &prompts, model)?;
        let n = resolved.n;
        // Choice `i * n + j` is prompt `i`'s `j`-th.
        runners
            .into_iter()
            .enumerate()
            .map(|(k, runner)| {
                runner.with_echo(Some(Echo {
                    text: texts[k / n].clone(),
                    ids: prompts[k / n].clone(),
                    logprobs: logprobs.is_some(),
                }))
            })
            .collect()
    } else {
        runners
    };
    let format = Format(ResponseHead::new("cmpl", response_model(&state, &resolved)));
    let choice = |c: Collected| CompletionChoice {
        index: c.index,
        logprobs: logprobs.map(|_| legacy_logprobs(&c.logprobs, 0)),
        text: c.text,
        finish_reason: Some(c.finish.reason.to_string()),
    };
    let body = |f: &Format, choices, usage| f.response(choices, Some(usage));
    generate::respond(runners, format, &resolved, in_flight, choice, body).await
}

/// Token ids of each prompt (text is encoded with BOS when the model wants one).
fn tokenize(prompt: &Prompt, model: &LoadedModel) -> Result<Vec<Vec<u32>>, ApiError> {
    let encode = |text: &str| {
        model
            .tokenizer
            .encode(text, true)
            .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))
    };
    let prompts = match prompt {
        Prompt::Text(text) => vec![encode(text)?],
        Prompt::Texts(texts) => texts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
        Prompt::Tokens(ids) => vec![ids.clone()],
        Prompt::TokenLists(lists) => lists.clone(),
    };
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(ApiError::invalid_param("prompt", "the prompt is empty"));
    }
    let vocab = model.vocab_size;
    if let Some(&id) = prompts.iter().flatten().find(|&&id| id as usize >= vocab) {
        return Err(ApiError::invalid_param(
            "prompt",
            format!("token id {id} is outside the vocabulary of {vocab} tokens"),
        ));
    }
    Ok(prompts)
}

/// The text `echo` returns for each prompt: a text prompt as sent, token ids decoded.
fn prompt_texts(
    prompt: &Prompt,
    ids: &[Vec<u32>],
    model: &LoadedModel,
) -> Result<Vec<String>, ApiError> {
    match prompt {
        Prompt::Text(text) => Ok(vec![text.clone()]),
        Prompt::Texts(texts) => Ok(texts.clone()),
        Prompt::Tokens(_) | Prompt::TokenLists(_) => ids
            .iter()
            .map(|ids| {
                model
                    .tokenizer
                    .decode(ids, false)
                    .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))
            })
            .collect(),
    }
}

/// The legacy completions logprobs shape; `offset` is where the text of these tokens starts.
fn legacy_logprobs(tokens: &[TokenLogprobs], offset: usize) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    let mut at = offset;
    for t in tokens {
        out.tokens.push(t.token.clone());
        out.token_logprobs.push(t.logprob);
        // An echoed prompt's first token has neither a logprob nor alternatives.
        out.top_logprobs.push(t.logprob.map(|_| {
            t.top
                .iter()
                .map(|(text, _, lp)| (text.clone(), *lp))
                .collect::<BTreeMap<_, _>>()
        }));
        out.text_offset.push(at as u32);
        at += t.token.len();
    }
    out
}

struct Format(ResponseHead);

impl Format {
    fn response(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> CompletionResponse {
        let head = &self.0;
        CompletionResponse {
            id: head.id.clone(),
            object: OBJECT_TEXT_COMPLETION.to_string(),
            created: head.created,
            model: head.model.clone(),
            choices,
            usage,
        }
    }
}

impl ChunkFormat for Format {
    fn start(&self, _index: u32) -> Option<String> {
        None
    }

    fn delta(&self, index: u32, delta: &ChoiceDelta) -> Option<String> {
        if delta.text.is_empty() && delta.logprobs.is_empty() && delta.finish.is_none() {
            return None;
        }
        let logprobs = (!delta.logprobs.is_empty()).then(|| legacy_logprobs(&delta.logprobs, 0));
        let finish_reason = delta.finish.map(|f| f.reason.to_string());
        let choice = CompletionChoice {
            index,
            text: delta.text.clone(),
            logprobs,
            finish_reason,
        };
        serde_json::to_string(&self.response(vec![choice], None)).ok()
    }

    fn usage(&self, usage: Usage) -> String {
        serde_json::to_string(&self.response(Vec::new(), Some(usage))).unwrap_or_default()
    }
}
