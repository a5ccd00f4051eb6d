//! The request path as one tower stack, built in one place; and its two outermost layers.
//!
//! What each layer knows of a request is in the type it takes, not in request extensions:
//! `Request<Incoming>` down to `Auth`, an [`Authed`] (the tenant) down to `Parse`, a
//! [`Parsed`](crate::request::Parsed) (facts, pool, tenant, body) below it, and a
//! [`Routed`](crate::routing::Routed) (plus the replica) from `Pick` to `Upstream`.
//!
//! ```text
//! RequestId   assign/forward x-request-id, open the tracing span
//! Errors      every GatewayError becomes an OpenAI-style error response (one place)
//! Auth        Bearer / x-api-key → tenant, or 401 before the body is read
//! InFlight    the pod's and the tenant's requests in flight: 503 / 429 past the caps
//! EarlyLimits the tenant's requests across models (before the body): 429
//! Parse       415/413/400/404 (also for a model the tenant may not use); body within the
//!             pod's budget (503); model, stream, max_tokens, priority, deadline, prefix hash;
//!             a route's name becomes its first model, the rest of its order kept
//! Fallback    a route's next model on a tenant limit's 429, no capacity within the
//!             request's share of its deadline, or a failed upstream; names the model
//!             that answered (`x-tokenscale-model`)
//! Observe     metrics as the client sees them (status, TTFT, TPOT, e2e, tokens)
//! Limits      tenant × model and tenant-wide RPM / input-TPM / output-TPM; 429 +
//!             x-ratelimit-*; settled at the end, refunded if dropped before the response
//! Admission   counts the arrival (offered demand); queue by priority, then fair share
//!             between tenants, then arrival, while replicas are full or absent; 503 past
//!             the request's deadline
//! Failover    another replica while nothing reached the client; a broken stream continues
//!             on another replica (exact for tokenscale engines, else as text)
//! Pick        load + prefix affinity + power of two choices; in-flight counting
//! Upstream    pooled HTTP/1.1 or h2c call; SSE relay; usage read back
//! ```

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures::future::{BoxFuture, FutureExt};

use http::{HeaderName, HeaderValue, Request, Response};
use hyper::body::Incoming;
use tokenscale_common::headers;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceBuilder};
use tracing::Instrument;

use crate::Body;
use crate::admission::{InFlightCounts, InFlightLayer};
use crate::auth::{AuthLayer, Authed, TenantDirectory};
use crate::error::GatewayError;
use crate::limits::{EarlyLimitsLayer, Limiter, LimitsLayer};
use crate::metrics::{Metrics, MetricsLayer};
use crate::proxy::{FailoverLayer, FailoverSettings, Upstream};
use crate::request::{ParseLayer, ParseSettings};
use crate::routing::route::FallbackLayer;
use crate::routing::{AdmissionLayer, PickLayer, Router};

/// The built request path.
pub type Stack = BoxCloneSyncService<Request<Incoming>, Response<Body>, Infallible>;

/// The path of Batch API lines (see [`build_batch`]): they arrive with their tenant.
pub type BatchStack =
    BoxCloneSyncService<Authed<http_body_util::Full<bytes::Bytes>>, Response<Body>, Infallible>;

/// What the stack is built from.
#[derive(Clone)]
pub struct StackParts {
    /// Tenants and keys.
    pub tenants: Arc<TenantDirectory>,
    /// Models and replicas.
    pub router: Arc<Router>,
    /// Token buckets.
    pub limiter: Arc<Limiter>,
    /// In-flight caps.
    pub in_flight: Arc<InFlightCounts>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Parse settings.
    pub parse: ParseSettings,
    /// Retries and continuations per request.
    pub failover: FailoverSettings,
    /// The innermost service.
    pub upstream: Upstream,
}

/// Builds the chain, outermost first.
pub fn build(parts: StackParts) -> Stack {
    let stack = ServiceBuilder::new()
        .layer(RequestIdLayer)
        .layer(ErrorsLayer)
        .layer(AuthLayer::new(parts.tenants))
        .layer(InFlightLayer::new(parts.in_flight, parts.metrics.clone()))
        .layer(EarlyLimitsLayer::new(
            parts.limiter.clone(),
            parts.metrics.clone(),
        ))
        .layer(ParseLayer::new(parts.router.clone(), parts.parse))
        .layer(FallbackLayer::new(parts.router, parts.metrics.clone()))
        .layer(MetricsLayer::new(parts.metrics.clone()))
        .layer(LimitsLayer::new(parts.limiter, parts.metrics.clone()))
        .layer(AdmissionLayer::new(parts.metrics.clone()))
        .layer(FailoverLayer::new(parts.failover, parts.metrics))
        .layer(PickLayer)
        .service(parts.upstream);
    BoxCloneSyncService::new(stack)
}

/// The path a Batch API line takes: the same parse, admission queue (in the `batch` class),
/// failover, replica picking and upstream as an interactive request, sharing their state.
/// Left out: authentication (the line runs as the tenant that created the batch: the runner
/// sends it [`Authed`], marked as a batch line), the interactive in-flight caps and rate limits (batch
/// work has its own limits, checked when a batch is created), and the interactive metrics
/// (batch lines are counted apart, so they neither pollute the latency the SLO is measured
/// on nor look like interactive demand to the autoscaler).
pub fn build_batch(parts: StackParts) -> BatchStack {
    let stack = ServiceBuilder::new()
        .layer(RequestIdLayer)
        .layer(ErrorsLayer)
        .layer(ParseLayer::new(parts.router.clone(), parts.parse))
        .layer(FallbackLayer::new(parts.router, parts.metrics.clone()))
        .layer(AdmissionLayer::new(parts.metrics.clone()))
        .layer(FailoverLayer::new(parts.failover, parts.metrics))
        .layer(PickLayer)
        .service(parts.upstream);
    BoxCloneSyncService::new(stack)
}

/// Layer adding [`RequestId`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIdLayer;

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestId<S>;
    fn layer(&self, inner: S) -> RequestId<S> {
        RequestId { inner }
    }
}

/// Keeps the client's `x-request-id` or assigns one, forwards it upstream, echoes it on the
/// response, and runs the request inside a tracing span carrying it.
#[derive(Debug, Clone)]
pub struct RequestId<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for RequestId<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let (id, span) = identify(&mut request);
        respond_with_id(self.inner.call(request), id, span)
    }
}

/// A batch line's path: the runner names the line in `x-request-id`.
impl<S, B> Service<Authed<B>> for RequestId<S>
where
    S: Service<Authed<B>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut authed: Authed<B>) -> Self::Future {
        let (id, span) = identify(&mut authed.request);
        respond_with_id(self.inner.call(authed), id, span)
    }
}

/// The request's id (the client's, or a new one set on it) and its span.
fn identify<B>(request: &mut Request<B>) -> (HeaderValue, tracing::Span) {
    let id = match request.headers().get(&REQUEST_ID) {
        Some(value) if value.len() <= 128 => value.clone(),
        _ => {
            let id = next_request_id();
            request.headers_mut().insert(REQUEST_ID, id.clone());
            id
        }
    };
    let span = tracing::info_span!("request", id = ?id, path = %request.uri().path());
    (id, span)
}

/// Runs `call` inside `span` and echoes `id` on its response.
fn respond_with_id<F>(
    call: F,
    id: HeaderValue,
    span: tracing::Span,
) -> BoxFuture<'static, Result<Response<Body>, Infallible>>
where
    F: Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
{
    async move {
        let mut response = call.await?;
        response.headers_mut().insert(REQUEST_ID, id);
        Ok(response)
    }
    .instrument(span)
    .boxed()
}

fn next_request_id() -> HeaderValue {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static PREFIX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        (crate::routing::picker::mix(nanos as u64 ^ std::process::id() as u64) >> 32) as u32
    });
    // `gw-`, 8 hex digits, `-`, up to 16 hex digits, written by hand on the stack (this runs
    // for every request; `fmt` cost more than the rest of the layer).
    let next = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut text = [0u8; 28];
    text[..3].copy_from_slice(b"gw-");
    write_hex(&mut text[3..11], u64::from(*prefix));
    text[11] = b'-';
    let digits = (16 - next.leading_zeros() as usize / 4).max(1);
    write_hex(&mut text[12..12 + digits], next);
    HeaderValue::from_bytes(&text[..12 + digits]).unwrap_or(HeaderValue::from_static("gw"))
}

/// Fills `out` with the low `out.len()` hex digits of `n`, most significant first.
fn write_hex(out: &mut [u8], mut n: u64) {
    for digit in out.iter_mut().rev() {
        *digit = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
    }
}

const REQUEST_ID: HeaderName = HeaderName::from_static(headers::REQUEST_ID);

/// Layer adding [`Errors`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorsLayer;

impl<S> Layer<S> for ErrorsLayer {
    type Service = Errors<S>;
    fn layer(&self, inner: S) -> Errors<S> {
        Errors { inner }
    }
}

/// Turns every [`GatewayError`] into its OpenAI-style response.
#[derive(Debug, Clone)]
pub struct Errors<S> {
    inner: S,
}

impl<S, R> Service<R> for Errors<S>
where
    S: Service<R, Response = Response<Body>, Error = GatewayError>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Inner layers are always ready (their capacity checks happen per request).
        match self.inner.poll_ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, request: R) -> Self::Future {
        let call = self.inner.call(request);
        async move {
            Ok(match call.await {
                Ok(response) => response,
                Err(error) => {
                    if error.status().is_server_error() {
                        tracing::warn!(%error, "request failed");
                    }
                    error.into_response()
                }
            })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_prefix_and_counter_in_hex() {
        let mut out = [0u8; 4];
        write_hex(&mut out, 0xbeef);
        assert_eq!(&out, b"beef");
        let (a, b) = (next_request_id(), next_request_id());
        let (a, b) = (a.to_str().expect("ascii"), b.to_str().expect("ascii"));
        let (prefix_a, count_a) = a.rsplit_once('-').expect("two parts");
        let (prefix_b, count_b) = b.rsplit_once('-').expect("two parts");
        assert_eq!(prefix_a, prefix_b);
        assert!(prefix_a.starts_with("gw-") && prefix_a.len() == 11, "{a}");
        let count = |c: &str| u64::from_str_radix(c, 16).expect("hex");
        assert!(count(count_b) > count(count_a), "{a} then {b}");
        assert!(!count_a.starts_with('0') || count_a == "0", "{a}");
    }
}
