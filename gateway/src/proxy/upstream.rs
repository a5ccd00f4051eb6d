//! `Upstream`: the innermost service — sends the request to the picked replica.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Version, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokenscale_common::headers as names;
use tower::Service;

use super::client::UpstreamClient;
use super::failover::ask_token_ids;
use super::priority_field::engine_priority_body;
use super::stream::{StreamSource, UpstreamStream};
use super::usage::{estimate_completion_tokens, parse_usage};
use crate::Body;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::request::Parsed;
use crate::routing::{ModelPool, Replica, ReplicaState, Routed, layer_missing as missing};
use crate::vocab::{Info, Report, Usage};

/// Settings of the upstream call.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// Time to wait for response headers, and then for a whole non-streaming body or a
    /// stream's first bytes.
    pub response_timeout: Duration,
    /// Longest gap between two chunks of a stream before the replica counts as failed.
    pub stream_idle_timeout: Duration,
    /// Largest non-streaming response body accepted from a replica, in bytes.
    pub max_response_bytes: usize,
    /// `Bearer <key>` presented to replicas that require the shared engine key.
    pub engine_authorization: Option<HeaderValue>,
    /// Characters per token, for the gateway's own count of an answer without `usage`.
    pub chars_per_token: f64,
}

/// Sends each request to the replica picked for it.
#[derive(Clone)]
pub struct Upstream {
    // One `Arc`: the service is cloned for every request.
    inner: Arc<Inner>,
}

struct Inner {
    client: UpstreamClient,
    metrics: Arc<Metrics>,
    settings: UpstreamSettings,
}

impl Upstream {
    /// An upstream caller.
    pub fn new(client: UpstreamClient, metrics: Arc<Metrics>, settings: UpstreamSettings) -> Self {
        let inner = Inner {
            client,
            metrics,
            settings,
        };
        Self {
            inner: Arc::new(inner),
        }
    }
}

/// Headers never forwarded: hop-by-hop ones, the client's credentials, and those rebuilt.
const DROPPED: [HeaderName; 12] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::AUTHORIZATION,
    HeaderName::from_static(names::API_KEY),
    header::HOST,
    header::CONTENT_LENGTH,
    HeaderName::from_static(names::PRIORITY),
];

/// Removes the [`DROPPED`] headers in place, moving the rest rather than copying them.
/// Runs twice per request: one pass over the few headers present finds what to remove,
/// rather than one hashed lookup per dropped name.
fn drop_unforwarded(headers: &mut HeaderMap) {
    while let Some(name) = headers.keys().find(|name| DROPPED.contains(name)).cloned() {
        headers.remove(&name);
    }
}

const UPSTREAM: HeaderName = HeaderName::from_static(names::UPSTREAM);
const PRIORITY: HeaderName = HeaderName::from_static(names::PRIORITY);
const TOKEN_IDS: HeaderName = HeaderName::from_static(names::STREAM_TOKEN_IDS);

impl Service<Routed> for Upstream {
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, routed: Routed) -> Self::Future {
        let this = self.inner.clone();
        async move {
            let Routed { request, replica } = routed;
            let Parsed {
                mut http,
                info,
                pool,
                ..
            } = request;
            // vLLM and SGLang with their priority scheduling read the class in the body.
            let path = http.uri().path();
            let class = info.priority;
            if let Some(body) =
                engine_priority_body(http.body(), path, class, pool.engine(), replica.engine())
            {
                *http.body_mut() = body;
            }
            // vLLM and llama-server report a stream's token ids when asked in the body, for
            // exact continuations: only a replica its metrics or its model's spec say runs one.
            let engine = replica.engine().or(Some(pool.engine().0));
            if info.stream
                && let Some(asked) = ask_token_ids(http.body(), engine, http.uri().path())
            {
                *http.body_mut() = asked;
            }
            this.exchange(http, info, pool, replica).await
        }
        .boxed()
    }
}

impl Inner {
    async fn exchange(
        &self,
        request: Request<Bytes>,
        info: Info,
        pool: Arc<ModelPool>,
        replica: Arc<Replica>,
    ) -> Result<Response<Body>, GatewayError> {
        let mut outgoing = build(request, &info, &replica)?;
        if let Some(authorization) = &self.settings.engine_authorization {
            outgoing
                .headers_mut()
                .insert(header::AUTHORIZATION, authorization.clone());
        }
        let timeout = self.settings.response_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let sent = tokio::time::timeout(timeout, self.client.send(outgoing, &replica.addr)).await;
        let response = match sent {
            Err(_) => return Err(self.timed_out(&info, &pool, &replica)),
            Ok(Err(error)) => {
                let kind = if error.is_connect() {
                    "connect"
                } else {
                    "reset"
                };
                return Err(self.replica_failed(&info, &pool, &replica, kind, error.to_string()));
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if matches!(
            status,
            StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
        ) {
            // The replica is loading, draining or overloaded: another may serve it.
            self.metrics
                .upstream_error(&info.model, &replica.addr.url, "status");
            if status == StatusCode::SERVICE_UNAVAILABLE {
                pool.set_replica_state(&replica, ReplicaState::Ejected);
            }
            return Err(GatewayError::Upstream {
                replica: replica.addr.url.clone(),
                message: format!("replica answered {status}"),
                retryable: true,
                status,
            });
        }
        let (mut parts, body) = response.into_parts();
        // As a fresh response would be: the upstream's protocol details stay behind.
        parts.version = Version::HTTP_11;
        parts.extensions = http::Extensions::new();
        drop_unforwarded(&mut parts.headers);
        // Room for what the layers above add (request id, rate-limit headers): one growth.
        parts.headers.reserve(16);
        if let Ok(value) = HeaderValue::try_from(replica.addr.url.as_str()) {
            parts.headers.insert(UPSTREAM, value);
        }
        let body = if info.stream && status.is_success() {
            let source = StreamSource {
                replica: replica.clone(),
                pool,
                metrics: self.metrics.clone(),
                model: info.model.clone(),
            };
            let first_timeout = deadline.saturating_duration_since(tokio::time::Instant::now());
            let idle = self.settings.stream_idle_timeout;
            match UpstreamStream::start(body, idle, first_timeout, source).await {
                // The failover layer's stream reads the usage and the first content from it.
                // Only a stream is continued elsewhere, so only a stream names its replica.
                Ok(stream) => Body::with_report(
                    stream,
                    Report {
                        replica: Some(Arc::from(replica.addr.url.as_str())),
                        ..Report::default()
                    },
                ),
                // Nothing reached the client yet: another replica may serve it whole.
                Err(why) => {
                    return Err(retryable(
                        &replica,
                        why.to_string(),
                        StatusCode::BAD_GATEWAY,
                    ));
                }
            }
        } else {
            let bytes = self.collect(body, deadline, &info, &pool, &replica).await?;
            let report = if status.is_success() {
                self.report(&bytes, &info)
            } else {
                Report::default()
            };
            Body::full(bytes, report)
        };
        Ok(Response::from_parts(parts, body))
    }

    /// A whole answer's usage: the engine's, or (an engine that reports none) the gateway's
    /// own count, so the tenant's limits are settled with an estimate rather than left
    /// charged the whole reservation, as a stream without usage is.
    fn report(&self, body: &[u8], info: &Info) -> Report {
        if let Some(usage) = parse_usage(body) {
            return Report {
                usage: Some(usage),
                ..Report::default()
            };
        }
        let estimate = estimate_completion_tokens(body, self.settings.chars_per_token);
        Report {
            usage: estimate.map(|completion_tokens| Usage {
                prompt_tokens: info.estimated_prompt_tokens,
                completion_tokens,
                cached_tokens: 0,
            }),
            estimated: estimate.is_some(),
            ..Report::default()
        }
    }

    /// Reads a whole non-streaming body (by `deadline`); a failure here is still before the
    /// client saw a byte, so it is retryable, unless the replica answered in full and the
    /// answer is too large: it would be again elsewhere, and the run is complete.
    async fn collect(
        &self,
        body: Incoming,
        deadline: tokio::time::Instant,
        info: &Info,
        pool: &Arc<ModelPool>,
        replica: &Arc<Replica>,
    ) -> Result<Bytes, GatewayError> {
        let limited = Limited::new(body, self.settings.max_response_bytes);
        match tokio::time::timeout_at(deadline, limited.collect()).await {
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => {
                Err(GatewayError::Upstream {
                    replica: replica.addr.url.clone(),
                    message: format!(
                        "the response is larger than {} bytes",
                        self.settings.max_response_bytes
                    ),
                    retryable: false,
                    status: StatusCode::BAD_GATEWAY,
                })
            }
            Ok(Err(error)) => {
                Err(self.replica_failed(info, pool, replica, "reset", error.to_string()))
            }
            Err(_) => Err(self.timed_out(info, pool, replica)),
        }
    }

    /// No response (or no whole body) within the response timeout: the replica is ejected as
    /// hung (a health probe readmits it) and another one may serve the request.
    fn timed_out(
        &self,
        info: &Info,
        pool: &Arc<ModelPool>,
        replica: &Arc<Replica>,
    ) -> GatewayError {
        self.metrics
            .upstream_error(&info.model, &replica.addr.url, "timeout");
        pool.set_replica_state(replica, ReplicaState::Ejected);
        GatewayError::UpstreamTimeout {
            replica: replica.addr.url.clone(),
            timeout_ms: self.settings.response_timeout.as_millis() as u64,
        }
    }

    /// Passive ejection: the replica gets no work until a health probe succeeds.
    fn replica_failed(
        &self,
        info: &Info,
        pool: &Arc<ModelPool>,
        replica: &Arc<Replica>,
        kind: &'static str,
        message: String,
    ) -> GatewayError {
        self.metrics
            .upstream_error(&info.model, &replica.addr.url, kind);
        if pool.set_replica_state(replica, ReplicaState::Ejected) {
            tracing::warn!(replica = %replica.addr.url, %message, "replica ejected");
        }
        retryable(replica, message, StatusCode::BAD_GATEWAY)
    }
}

/// A failure of `replica` before the client saw anything: another replica may serve it.
fn retryable(replica: &Replica, message: String, status: StatusCode) -> GatewayError {
    GatewayError::Upstream {
        replica: replica.addr.url.clone(),
        message,
        retryable: true,
        status,
    }
}

/// The request for `replica`: the client's, moved (its body is shared, not copied), less
/// the headers not forwarded, plus length, priority and (HTTP/1.1) `Host`.
fn build(
    request: Request<Bytes>,
    info: &Info,
    replica: &Replica,
) -> Result<Request<Full<Bytes>>, GatewayError> {
    let (mut parts, body) = request.into_parts();
    // HTTP/1.1 takes the client's origin-form URI as it is; h2c needs an absolute one.
    if replica.addr.h2c || parts.uri.authority().is_some() {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = replica
            .addr
            .uri(path)
            .map_err(|e| missing(&format!("upstream URI ({e})")))?;
    }
    parts.version = Version::HTTP_11;
    parts.extensions = http::Extensions::new();
    let headers = &mut parts.headers;
    drop_unforwarded(headers);
    headers.insert(header::CONTENT_LENGTH, body.len().into());
    headers.insert(PRIORITY, HeaderValue::from_static(info.priority.as_str()));
    if info.stream {
        // tokenscale engines then report each chunk's token ids, for exact continuations.
        headers.insert(TOKEN_IDS, HeaderValue::from_static("1"));
    }
    if !replica.addr.h2c {
        headers.insert(header::HOST, replica.addr.host.clone());
    }
    Ok(Request::from_parts(parts, Full::new(body)))
}
