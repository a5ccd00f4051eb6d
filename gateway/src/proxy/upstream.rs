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
use super::sse::SseRelay;
use super::usage::parse_usage;
use crate::Body;
use crate::error::{GatewayError, full_body};
use crate::metrics::Metrics;
use crate::request::Info;
use crate::routing::{ModelPool, Picked, Replica, ReplicaState, layer_missing as missing};

/// Settings of the upstream call.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// Time to wait for response headers (and a whole non-streaming body).
    pub response_timeout: Duration,
    /// Largest non-streaming response body accepted from a replica, in bytes.
    pub max_response_bytes: usize,
}

/// Sends requests to the replica in their `Picked` extension.
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

impl Service<Request<Bytes>> for Upstream {
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let this = self.inner.clone();
        async move {
            let ext = request.extensions();
            let info = ext.get::<Info>().cloned().ok_or_else(|| missing("info"))?;
            let pool = ext
                .get::<Arc<ModelPool>>()
                .cloned()
                .ok_or_else(|| missing("pool"))?;
            let replica = ext
                .get::<Picked>()
                .map(|p| p.0.clone())
                .ok_or_else(|| missing("replica"))?;
            this.exchange(request, info, pool, replica).await
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
        let outgoing = build(request, &info, &replica)?;
        let timeout = self.settings.response_timeout;
        let sent = tokio::time::timeout(timeout, self.client.send(outgoing, &replica.addr)).await;
        let response = match sent {
            Err(_) => {
                self.metrics
                    .upstream_error(&info.model, &replica.addr.url, "timeout");
                return Err(GatewayError::UpstreamTimeout {
                    replica: replica.addr.url.clone(),
                    timeout_ms: timeout.as_millis() as u64,
                });
            }
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
            if status == StatusCode::SERVICE_UNAVAILABLE && replica.set_state(ReplicaState::Ejected)
            {
                pool.capacity_changed();
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
            let relay = SseRelay::new(
                body,
                info.clone(),
                replica.clone(),
                pool,
                self.metrics.clone(),
            );
            relay.boxed_unsync()
        } else {
            let bytes = self.collect(body, &info, &pool, &replica).await?;
            if status.is_success()
                && let Some(usage) = parse_usage(&bytes)
            {
                info.outcome.set_usage(usage);
            }
            full_body(bytes)
        };
        Ok(Response::from_parts(parts, body))
    }

    /// Reads a whole non-streaming body; a failure here is still before the client saw a
    /// byte, so it is retryable.
    async fn collect(
        &self,
        body: Incoming,
        info: &Info,
        pool: &Arc<ModelPool>,
        replica: &Arc<Replica>,
    ) -> Result<Bytes, GatewayError> {
        let limited = Limited::new(body, self.settings.max_response_bytes);
        match tokio::time::timeout(self.settings.response_timeout, limited.collect()).await {
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(error)) => {
                Err(self.replica_failed(info, pool, replica, "reset", error.to_string()))
            }
            Err(_) => Err(GatewayError::UpstreamTimeout {
                replica: replica.addr.url.clone(),
                timeout_ms: self.settings.response_timeout.as_millis() as u64,
            }),
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
        if replica.set_state(ReplicaState::Ejected) {
            pool.capacity_changed();
            tracing::warn!(replica = %replica.addr.url, %message, "replica ejected");
        }
        GatewayError::Upstream {
            replica: replica.addr.url.clone(),
            message,
            retryable: true,
            status: StatusCode::BAD_GATEWAY,
        }
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
    if !replica.addr.h2c {
        headers.insert(header::HOST, replica.addr.host.clone());
    }
    Ok(Request::from_parts(parts, Full::new(body)))
}
