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
use tokenscale_common::openai::{PromptTokensDetails, SSE_DONE, Usage};

use super::ApiError;
use super::choice::{ChoiceDelta, ChoiceRunner, Finish, TokenLogprobs};
use super::params::{MAX_CHOICES, Resolved, fit_max_tokens};
use super::state::{InFlight, LoadedModel};
use crate::runtime::GenerateRequest;

/// Submits `n` choices per prompt; choice `i * n + j` is prompt `i`'s `j`-th. Every prompt is
/// checked against the context before anything is submitted.
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
    let mut runners = Vec::with_capacity(prompts.len() * resolved.n);
    for (prompt, max_tokens) in prompts.iter().zip(limits) {
        for j in 0..resolved.n {
            let mut params = resolved.params.clone();
            params.max_tokens = Some(max_tokens);
            // Choices of one seeded request differ from each other, and replay exactly.
            params.seed = params.seed.map(|s| s.wrapping_add(j as u64));
            let request = GenerateRequest {
                prompt_tokens: prompt.clone(),
                params,
                priority: resolved.priority,
                cache_salt: resolved.cache_salt.clone(),
                arrival,
            };
            let stream = model
                .engine
                .submit(request)
                .map_err(|e| ApiError::unavailable(e.to_string()))?;
            let index = runners.len() as u32;
            let want_logprobs = resolved.params.logprobs.is_some();
            let stops = &resolved.params.stop;
            let tokenizer = model.tokenizer.clone();
            runners.push(ChoiceRunner::new(
                index,
                stream,
                tokenizer,
                stops,
                resolved.skip_special_tokens,
                prompt.len(),
                want_logprobs,
            ));
        }
    }
    Ok(runners)
}

/// A finished choice.
#[derive(Debug, Clone)]
pub struct Collected {
    pub index: u32,
    pub text: String,
    pub logprobs: Vec<TokenLogprobs>,
    pub finish: Finish,
}

/// Runs every choice to its end.
pub async fn collect(runners: Vec<ChoiceRunner>) -> Result<Vec<Collected>, ApiError> {
    let mut out = Vec::with_capacity(runners.len());
    // The engine runs all choices at once; reading them one after another loses nothing.
    for mut runner in runners {
        let mut text = String::new();
        let mut logprobs = Vec::new();
        loop {
            let Some(delta) = runner.next().await else {
                return Err(ApiError::internal("a choice ended without a finish reason"));
            };
            let delta = delta?;
            text.push_str(&delta.text);
            logprobs.extend(delta.logprobs);
            if let Some(finish) = delta.finish {
                out.push(Collected {
                    index: runner.index,
                    text,
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
    n: usize,
    include_usage: bool,
    in_flight: InFlight,
) -> Response {
    let format = Arc::new(format);
    let usage = Arc::new(Mutex::new(UsageSum::new(n)));
    let starts: Vec<String> = runners
        .iter()
        .filter_map(|r| format.start(r.index))
        .collect();
    let choices = stream::select_all(
        runners
            .into_iter()
            .map(|runner| Box::pin(choice_events(runner, format.clone(), usage.clone()))),
    );
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

/// The chunks of one choice; an engine failure becomes an error event that ends it.
fn choice_events<F: ChunkFormat>(
    runner: ChoiceRunner,
    format: Arc<F>,
    usage: Arc<Mutex<UsageSum>>,
) -> impl Stream<Item = String> + Send {
    stream::unfold(Some(runner), move |runner| {
        let format = format.clone();
        let usage = usage.clone();
        async move {
            let mut runner = runner?;
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
                        if let Some(json) = format.delta(runner.index, &delta) {
                            return Some((json, (!done).then_some(runner)));
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
        return Ok(sse(
            runners,
            format,
            resolved.n,
            resolved.include_usage,
            in_flight,
        ));
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
