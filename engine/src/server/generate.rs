//! What both generation endpoints share: submitting every (prompt, choice) pair to the engine,
//! collecting the choices for a plain response, and streaming them as server-sent events.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream::{self, Stream, StreamExt};
use tokenscale_common::openai::{
    CompletionTokensDetails, PromptTokensDetails, SSE_DONE, TOKEN_IDS_MEMBER, ToolCall, Usage,
    merge_tool_call_delta,
};

use super::ApiError;
use super::choice::{ChoiceDelta, ChoiceRunner, Finish, TokenLogprobs};
use super::params::{MAX_CHOICES, Resolved, fit_max_tokens};
use super::state::{InFlight, LoadedModel};
use crate::runtime::GenerateRequest;

/// Submits `n` choices per prompt; choice `i * n + j` is prompt `i`'s `j`-th. Every prompt is
/// checked against the context before anything is submitted. A resumed answer
/// (`tokenscale_resume`) continues after its given start.
pub fn start(
    model: &LoadedModel,
    prompts: &[Vec<u32>],
    resolved: &Resolved,
    default_max_tokens: Option<usize>,
    arrival: Instant,
) -> Result<Vec<ChoiceRunner>, ApiError> {
    if prompts.len() * resolved.n > MAX_CHOICES {
        let message = format!(
            "{} prompts × n = {} asks for more than {MAX_CHOICES} completions",
            prompts.len(),
            resolved.n
        );
        return Err(ApiError::invalid_param("n", message));
    }
    let limits: Vec<u32> = prompts
        .iter()
        .map(|p| {
            fit_max_tokens(
                p.len(),
                resolved.max_tokens,
                default_max_tokens,
                model.max_model_len,
            )
        })
        .collect::<Result<_, _>>()?;
    let resumed = resolved.resume.as_deref().unwrap_or_default();
    if !resumed.is_empty() && (prompts.len() != 1 || resolved.n != 1) {
        return Err(ApiError::invalid_param(
            "tokenscale_resume",
            "a resumed answer needs one prompt and n = 1",
        ));
    }
    if let Some(&id) = resumed.iter().find(|&&id| id as usize >= model.vocab_size) {
        return Err(ApiError::invalid_param(
            "tokenscale_resume",
            format!("token id {id} is outside the vocabulary"),
        ));
    }
    let mut runners = Vec::with_capacity(prompts.len() * resolved.n);
    for (prompt, max_tokens) in prompts.iter().zip(limits) {
        if resumed.len() > max_tokens as usize {
            return Err(ApiError::invalid_param(
                "tokenscale_resume",
                format!(
                    "the resumed answer has {} tokens, more than its max_tokens of {max_tokens}",
                    resumed.len()
                ),
            ));
        }
        for j in 0..resolved.n {
            let mut params = resolved.params.clone();
            params.max_tokens = Some(max_tokens);
            // Choices of one seeded request differ from each other, and replay exactly.
            params.seed = params.seed.map(|s| s.wrapping_add(j as u64));
            let mut runner = ChoiceRunner::new(
                runners.len() as u32,
                model.tokenizer.clone(),
                &resolved.params.stop,
                resolved.skip_special_tokens,
                prompt.len(),
                resolved.params.logprobs.is_some(),
            )
            .with_tool_calls(resolved.tool_calls.clone())
            .with_reasoning(resolved.reasoning.clone());
            // Scoring a prompt needs the engine even with `max_tokens` 0.
            let scores_prompt = params.prompt_logprobs.is_some();
            if scores_prompt || !runner.replay(resumed, max_tokens)? {
                // A constrained answer resumes with its grammar past the tokens it has.
                let constraint = match resolved.constraint.clone() {
                    Some(mut c) => {
                        c.advance(resumed).map_err(|e| {
                            ApiError::invalid_param("tokenscale_resume", e.to_string())
                        })?;
                        Some(c)
                    }
                    None => None,
                };
                let request = GenerateRequest {
                    prompt_tokens: [prompt.as_slice(), resumed].concat(),
                    params,
                    priority: resolved.priority,
                    // Blocks computed with an adapter's weights are that adapter's alone.
                    cache_salt: match &resolved.adapter {
                        Some(a) => Some(a.cache_salt(resolved.cache_salt.as_deref())),
                        None => resolved.cache_salt.clone(),
                    },
                    arrival,
                    resumed_tokens: resumed.len(),
                    constraint,
                    adapter: resolved.adapter.clone(),
                };
                let stream = model
                    .engine
                    .submit(request)
                    .map_err(|e| ApiError::unavailable(e.to_string()))?;
                runner.attach(stream);
            }
            runners.push(runner);
        }
    }
    Ok(runners)
}

/// A finished choice.
#[derive(Debug, Clone)]
pub struct Collected {
    pub index: u32,
    /// The content (without the text of tool calls, or the reasoning).
    pub text: String,
    /// The reasoning split off the text (chat with a reasoning parser).
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub logprobs: Vec<TokenLogprobs>,
    pub finish: Finish,
}

/// Runs every choice to its end.
pub async fn collect(runners: Vec<ChoiceRunner>) -> Result<Vec<Collected>, ApiError> {
    let mut out = Vec::with_capacity(runners.len());
    // The engine runs all choices at once; reading them one after another loses nothing.
    for mut runner in runners {
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut tool_calls: Vec<ToolCall> = Vec::new();
        let mut logprobs = Vec::new();
        loop {
            let Some(delta) = runner.next().await else {
                return Err(ApiError::internal("a choice ended without a finish reason"));
            };
            let delta = delta?;
            text.push_str(&delta.text);
            reasoning.push_str(&delta.reasoning);
            // The streamed deltas, put together: the same calls a stream would show.
            for d in &delta.tool_calls {
                merge_tool_call_delta(&mut tool_calls, d);
            }
            logprobs.extend(delta.logprobs);
            if let Some(finish) = delta.finish {
                out.push(Collected {
                    index: runner.index,
                    text,
                    reasoning,
                    tool_calls,
                    logprobs,
                    finish,
                });
                break;
            }
        }
    }
    Ok(out)
}

/// Adds up the usage of finished choices; prompt tokens count once per prompt, not per choice.
#[derive(Debug, Clone, Default)]
pub struct UsageSum {
    n: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
    cached_tokens: u64,
    /// `None` until a choice with a reasoning parser finishes.
    reasoning_tokens: Option<u64>,
}

impl UsageSum {
    /// A sum for a request with `n` choices per prompt.
    pub fn new(n: usize) -> Self {
        Self {
            n: n.max(1),
            ..Self::default()
        }
    }

    /// Adds choice `index`'s finish.
    pub fn add(&mut self, index: u32, finish: &Finish) {
        if (index as usize).is_multiple_of(self.n) {
            self.prompt_tokens += finish.usage.prompt_tokens as u64;
            self.cached_tokens += finish.usage.cached_tokens as u64;
        }
        self.completion_tokens += finish.usage.completion_tokens as u64;
        if let Some(n) = finish.reasoning_tokens {
            *self.reasoning_tokens.get_or_insert(0) += n as u64;
        }
    }

    /// The OpenAI `usage` object.
    pub fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self.prompt_tokens + self.completion_tokens,
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: self.cached_tokens,
            }),
            completion_tokens_details: self
                .reasoning_tokens
                .map(|reasoning_tokens| CompletionTokensDetails { reasoning_tokens }),
        }
    }
}

/// How an endpoint writes its stream chunks (JSON text of one `data:` line each).
pub trait ChunkFormat: Send + Sync + 'static {
    /// A chunk sent before any token of choice `index` (chat: the assistant role).
    fn start(&self, index: u32) -> Option<String>;
    /// The chunk for a delta; `None` skips it (nothing to say yet).
    fn delta(&self, index: u32, delta: &ChoiceDelta) -> Option<String>;
    /// The final usage chunk.
    fn usage(&self, usage: Usage) -> String;
}

/// The SSE response streaming `runners`. `in_flight` is held until the stream ends (or the
/// client goes away, which drops the stream and cancels what is left).
pub fn sse(
    runners: Vec<ChoiceRunner>,
    format: impl ChunkFormat,
    resolved: &Resolved,
    in_flight: InFlight,
) -> Response {
    let format = Arc::new(format);
    let usage = Arc::new(Mutex::new(UsageSum::new(resolved.n)));
    let include_usage = resolved.include_usage;
    // A resumed answer's client already has its start (the chat role chunk among it).
    let starts: Vec<String> = match resolved.resume {
        Some(_) => Vec::new(),
        None => runners
            .iter()
            .filter_map(|r| format.start(r.index))
            .collect(),
    };
    let token_ids = resolved.stream_token_ids;
    let choices = stream::select_all(runners.into_iter().map(|runner| {
        Box::pin(choice_events(
            runner,
            format.clone(),
            usage.clone(),
            token_ids,
        ))
    }));
    let tail = stream::once(async move {
        let _in_flight = in_flight;
        let mut lines = Vec::new();
        if include_usage {
            let usage = usage.lock().unwrap_or_else(|e| e.into_inner()).usage();
            lines.push(format.usage(usage));
        }
        lines.push(SSE_DONE.to_string());
        stream::iter(lines)
    })
    .flatten();
    let events = stream::iter(starts)
        .chain(choices)
        .chain(tail)
        .map(|json| Ok::<_, Infallible>(Bytes::from(format!("data: {json}\n\n"))));
    Response::builder()
        .header(CONTENT_TYPE, "text/event-stream")
        .header(CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// The chunks of one choice; an engine failure becomes an error event that ends it. With
/// `token_ids`, each chunk also carries the ids of the tokens whose text it completes (those
/// of deltas that said nothing yet ride with the next chunk).
fn choice_events<F: ChunkFormat>(
    runner: ChoiceRunner,
    format: Arc<F>,
    usage: Arc<Mutex<UsageSum>>,
    token_ids: bool,
) -> impl Stream<Item = String> + Send {
    stream::unfold(Some((runner, Vec::new())), move |state| {
        let format = format.clone();
        let usage = usage.clone();
        async move {
            let (mut runner, mut pending_ids) = state?;
            loop {
                match runner.next().await? {
                    Ok(delta) => {
                        if let Some(finish) = &delta.finish {
                            usage
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .add(runner.index, finish);
                        }
                        let done = delta.finish.is_some();
                        pending_ids.extend_from_slice(&delta.token_ids);
                        if let Some(mut json) = format.delta(runner.index, &delta) {
                            if token_ids {
                                append_token_ids(&mut json, &std::mem::take(&mut pending_ids));
                            }
                            return Some((json, (!done).then_some((runner, pending_ids))));
                        }
                        if done {
                            return None;
                        }
                    }
                    Err(err) => {
                        let json = serde_json::to_string(&err.body()).unwrap_or_default();
                        return Some((json, None));
                    }
                }
            }
        }
    })
}

/// Adds the [`TOKEN_IDS_MEMBER`] to a chunk's JSON object (written by serde: it ends in `}`).
fn append_token_ids(json: &mut String, ids: &[u32]) {
    if !json.ends_with('}') {
        return;
    }
    json.pop();
    json.push_str(",\"");
    json.push_str(TOKEN_IDS_MEMBER);
    json.push_str("\":[");
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str(&id.to_string());
    }
    json.push_str("]}");
}

/// What every response and chunk of one request repeats: its id, creation time and model.
pub struct ResponseHead {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl ResponseHead {
    /// A fresh head: id `prefix-…`, created now.
    pub fn new(prefix: &str, model: &str) -> Self {
        Self {
            id: response_id(prefix),
            created: unix_now_s(),
            model: model.to_string(),
        }
    }
}

/// The answer to a generation request: SSE chunks when it asked for a stream, else one JSON
/// body, built by `body` from each collected choice (turned into the endpoint's choice type by
/// `choice`) and the summed usage.
pub async fn respond<F, C, B>(
    runners: Vec<ChoiceRunner>,
    format: F,
    resolved: &Resolved,
    in_flight: InFlight,
    mut choice: impl FnMut(Collected) -> C,
    body: impl FnOnce(&F, Vec<C>, Usage) -> B,
) -> Result<Response, ApiError>
where
    F: ChunkFormat,
    B: serde::Serialize,
{
    if resolved.stream {
        return Ok(sse(runners, format, resolved, in_flight));
    }
    let collected = collect(runners).await?;
    let mut usage = UsageSum::new(resolved.n);
    let choices = collected
        .into_iter()
        .map(|c| {
            usage.add(c.index, &c.finish);
            choice(c)
        })
        .collect();
    let response = body(&format, choices, usage.usage());
    drop(in_flight);
    Ok(axum::Json(response).into_response())
}

/// A response id: `prefix` plus a process-unique suffix.
pub fn response_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!(
        "{prefix}-{nanos:x}{:04x}",
        NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff
    )
}

/// Unix seconds now.
pub fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
