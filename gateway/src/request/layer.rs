//! `Parse<S>`: buffers the (small, JSON) request body and reads what the gateway needs.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use http::{Request, Response, header};
use http_body_util::BodyExt;
use tower::{Layer, Service};

use super::deadline::{request_deadline, request_priority};
use super::{Parsed, parse_body, request_usage_in_stream, with_model};
use crate::Body;
use crate::vocab::{Info, RequestInfo};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::Authed;
use crate::auth::ModelAccess;
use crate::config::{QueueConfig, TokenConfig};
use crate::error::{BoxError, GatewayError};
use crate::routing::{Fallbacks, ModelPool, Router};

/// What the parse layer needs to know.
#[derive(Debug, Clone)]
pub struct ParseSettings {
    /// Largest body, in bytes.
    pub max_body_bytes: usize,
    /// Body bytes all requests together may have buffered at once.
    pub max_buffered_body_bytes: usize,
    /// The pod's body budget (`max_buffered_body_bytes` permits), shared with batch uploads.
    pub body_budget: Arc<Semaphore>,
    /// Token estimation.
    pub tokens: TokenConfig,
    /// Default and largest deadlines.
    pub queue: QueueConfig,
}

/// Layer adding [`Parse`].
#[derive(Clone)]
pub struct ParseLayer {
    router: Arc<Router>,
    settings: Arc<ParseSettings>,
    budget: Arc<Semaphore>,
}

impl ParseLayer {
    /// Parses against the models of `router`.
    pub fn new(router: Arc<Router>, settings: ParseSettings) -> Self {
        Self {
            router,
            budget: settings.body_budget.clone(),
            settings: Arc::new(settings),
        }
    }
}

impl<S> Layer<S> for ParseLayer {
    type Service = Parse<S>;
    fn layer(&self, inner: S) -> Parse<S> {
        Parse {
            inner,
            router: self.router.clone(),
            settings: self.settings.clone(),
            budget: self.budget.clone(),
        }
    }
}

/// Checks content type and size (415, 413), buffers the body within the pod's body budget
/// (503 past it), parses the fields the gateway uses without re-serialising the body (400),
/// finds the model's pool (404, also for a model the tenant may not use), and calls the
/// inner service with the request [`Parsed`]. The only body change is asking for usage on
/// streams (`stream_options.include_usage`).
#[derive(Clone)]
pub struct Parse<S> {
    inner: S,
    router: Arc<Router>,
    settings: Arc<ParseSettings>,
    budget: Arc<Semaphore>,
}

impl<S, B> Service<Authed<B>> for Parse<S>
where
    S: Service<Parsed, Response = Response<Body>, Error = GatewayError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, authed: Authed<B>) -> Self::Future {
        let Authed {
            tenant,
            batch_line,
            request,
        } = authed;
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (router, settings) = (self.router.clone(), self.settings.clone());
        let budget = self.budget.clone();
        async move {
            let arrival = Instant::now();
            check_content_type(&request)?;
            let (mut parts, body) = request.into_parts();
            let declared = parts
                .headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok());
            // The body's bytes count against the pod's budget until the response starts.
            let limits = BodyLimits {
                max: settings.max_body_bytes,
                declared,
                budget: &budget,
            };
            let (bytes, _held) = read_body(body, limits).await?;
            let facts = Facts {
                headers: &parts.headers,
                bytes: &bytes,
                arrival,
                access: &tenant.models,
            };
            let (info, pool, body, route) = read(facts, &router, &settings)?;
            parts
                .headers
                .insert(header::CONTENT_LENGTH, body.len().into());
            let parsed = Parsed {
                info,
                pool,
                tenant,
                batch_line,
                route,
                exclude: Vec::new(),
                http: Request::from_parts(parts, body),
            };
            futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(parsed).await
        }
        .boxed()
    }
}

/// What bounds one body: its largest size, the size it declared, and the pod's budget.
struct BodyLimits<'a> {
    max: usize,
    declared: Option<usize>,
    budget: &'a Arc<Semaphore>,
}

/// Reads the body up to `limits.max` bytes within the pod's budget: a body that declared its
/// length takes all of it from the budget before a byte is read, others chunk by chunk; 503
/// when the pod has too many bodies buffered. Returns it with the bytes it holds. Past the
/// limit it keeps reading and discarding (up to 16× the limit, for 5 s at most) before
/// answering 413, so that a client still writing its body reads the 413 instead of a
/// connection reset.
async fn read_body<B>(
    body: B,
    limits: BodyLimits<'_>,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), GatewayError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = std::pin::pin!(body);
    // A body that arrives as one frame (the usual case) is kept as that frame, not copied.
    let mut only: Option<Bytes> = None;
    let mut kept = bytes::BytesMut::new();
    let (limit, budget) = (limits.max, limits.budget);
    let mut seen = 0usize;
    let mut held: Option<OwnedSemaphorePermit> = None;
    let declared = limits.declared.filter(|&n| n <= limit);
    if let Some(declared) = declared {
        hold(&mut held, budget, declared)?;
    }
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let frame = match tokio::time::timeout_at(give_up, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                let error: BoxError = error.into();
                return Err(GatewayError::bad_request(
                    format!("Could not read the request body: {error}"),
                    None,
                ));
            }
            Err(_) if seen > limit => break,
            Err(_) => {
                return Err(GatewayError::bad_request(
                    "The request body did not arrive within 5 s.",
                    None,
                ));
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen <= limit {
            if declared.is_none() {
                hold(&mut held, budget, data.len())?;
            }
            match only.take() {
                None if kept.is_empty() => only = Some(data),
                Some(first) => {
                    // A body of declared length is copied once into one buffer of its size,
                    // not grown by doubling (each step copies it again and the allocator
                    // keeps the old buffers: a flood of slow 4 MiB uploads peaked at 210-256
                    // MiB of RSS under a 64 MiB budget).
                    kept.reserve(declared.unwrap_or(0).max(first.len() + data.len()));
                    kept.extend_from_slice(&first);
                    kept.extend_from_slice(&data);
                }
                None => kept.extend_from_slice(&data),
            }
        } else if seen > limit.saturating_mul(16) {
            break;
        }
    }
    if seen > limit {
        return Err(GatewayError::PayloadTooLarge { limit_bytes: limit });
    }
    Ok((only.unwrap_or_else(|| kept.freeze()), held))
}

/// Adds `bytes` from `budget` to `held`, or refuses (503) when the budget is spent: a flood
/// of large bodies is bounded in memory, not buffered until the pod runs out.
fn hold(
    held: &mut Option<OwnedSemaphorePermit>,
    budget: &Arc<Semaphore>,
    bytes: usize,
) -> Result<(), GatewayError> {
    let Ok(bytes) = u32::try_from(bytes) else {
        return Err(body_budget_spent());
    };
    let permit = budget
        .clone()
        .try_acquire_many_owned(bytes)
        .map_err(|_| body_budget_spent())?;
    match held {
        Some(held) => held.merge(permit),
        None => *held = Some(permit),
    }
    Ok(())
}

/// The pod's body budget of `bytes` (`bounds.max_buffered_body_bytes`).
pub fn body_budget(bytes: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS)))
}

/// The 503 (with `retry-after`) of a spent body budget.
pub fn body_budget_spent() -> GatewayError {
    GatewayError::Overloaded {
        message: "The gateway is reading too many request bodies at once; retry shortly.".into(),
        retry_after: Duration::from_secs(1),
    }
}

fn check_content_type<B>(request: &Request<B>) -> Result<(), GatewayError> {
    let value = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = value.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(GatewayError::UnsupportedMediaType(value.to_string()))
    }
}

/// What a request's facts are read from.
struct Facts<'a> {
    headers: &'a http::HeaderMap,
    bytes: &'a Bytes,
    arrival: Instant,
    /// The models the tenant may use.
    access: &'a ModelAccess,
}

/// Reads the request's facts from its headers and body; returns them with the pool of its
/// model (a route's first model), the body to forward and the rest of a route's order.
fn read(
    facts: Facts<'_>,
    router: &Router,
    settings: &ParseSettings,
) -> Result<(Info, Arc<ModelPool>, Bytes, Option<Fallbacks>), GatewayError> {
    let Facts {
        headers,
        bytes,
        arrival,
        access,
    } = facts;
    let body = parse_body(bytes)?;
    let name = body
        .model
        .as_deref()
        .ok_or_else(|| GatewayError::bad_request("`model` is required", Some("model")))?;
    let Resolved {
        pool,
        route,
        adapter,
    } = resolve(router, name, access)?;
    let model = pool.name.as_str();
    let prompt = body.summarize_prompt(pool.settings.affinity_prefix_chars)?;
    let reserved_output_tokens = body.reserved_output_tokens(settings.tokens.default_max_tokens)?;
    let priority = request_priority(headers, body.priority)?;
    let cold_start = pool.cold_start_while_empty();
    let deadline = arrival + request_deadline(headers, priority, &settings.queue, cold_start)?;
    let stream = body.stream.unwrap_or(false);
    let client_wants_usage = body
        .stream_options
        .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok())
        .is_some_and(|v| v.get("include_usage") == Some(&serde_json::Value::Bool(true)));
    let forward = if stream && !client_wants_usage {
        request_usage_in_stream(bytes, body.stream_options)
    } else {
        bytes.clone()
    };
    let forward = if route.is_some() {
        with_model(&forward, model)
    } else {
        forward
    };
    let info = Arc::new(RequestInfo {
        model: model.to_string(),
        adapter,
        stream,
        client_wants_usage,
        reserved_output_tokens,
        estimated_prompt_tokens: prompt.estimated_tokens(settings.tokens.chars_per_token),
        priority,
        arrival,
        deadline,
        prefix_hash: prompt.prefix_hash,
    });
    Ok((info, pool, forward, route))
}

/// The pool a request for `name` goes to: the model's; a LoRA adapter's parent, with the
/// adapter; or for a route the first of its models the tenant may use that is served, with
/// the rest of its order. A name the tenant may not use answers exactly as one that does not
/// exist: nothing to probe. An adapter may be used when its own name or its parent is allowed.
fn resolve(router: &Router, name: &str, access: &ModelAccess) -> Result<Resolved, GatewayError> {
    let resolved = |pool, route, adapter| Resolved {
        pool,
        route,
        adapter,
    };
    let not_found = || GatewayError::ModelNotFound(name.to_string());
    if let Some(pool) = router.model(name) {
        let allowed = access.allows(name);
        return if allowed {
            Ok(resolved(pool, None, None))
        } else {
            Err(not_found())
        };
    }
    if let Some(parent) = router.adapter_parent(name) {
        if !access.allows(name) && !access.allows(&parent.name) {
            return Err(not_found());
        }
        return Ok(resolved(parent, None, Some(name.to_string())));
    }
    if !access.allows(name) {
        return Err(not_found());
    }
    let order = router.route_order(name).ok_or_else(not_found)?;
    let mut usable = order.into_iter().filter(|model| access.allows(model));
    let pool = usable
        .by_ref()
        .find_map(|model| router.model(&model))
        .ok_or_else(|| GatewayError::NoReplicaLeft {
            model: name.to_string(),
        })?;
    let route = Fallbacks {
        route: name.into(),
        next: usable.collect(),
    };
    Ok(resolved(pool, Some(route), None))
}

/// Where a request goes: its pool, the rest of a route's order, the LoRA adapter it names.
struct Resolved {
    pool: Arc<ModelPool>,
    route: Option<Fallbacks>,
    adapter: Option<String>,
}
