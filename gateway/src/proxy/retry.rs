//! `Retry<S>`: re-sends a request to another replica when the failure came before any byte
//! reached the client. It sits above the picker so each attempt is picked afresh.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use http::{Request, Response};
use tower::{Layer, Service};

use crate::Body;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::request::Info;
use crate::routing::Exclude;

/// Layer adding [`Retry`].
#[derive(Clone)]
pub struct RetryLayer {
    max_attempts: u32,
    metrics: Arc<Metrics>,
}

impl RetryLayer {
    /// At most `max_attempts` attempts per request, each on a replica not yet tried.
    pub fn new(max_attempts: u32, metrics: Arc<Metrics>) -> Self {
        Self {
            max_attempts,
            metrics,
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;
    fn layer(&self, inner: S) -> Retry<S> {
        Retry {
            inner,
            max_attempts: self.max_attempts,
            metrics: self.metrics.clone(),
        }
    }
}

/// Retries retryable upstream failures (connect errors, resets before the response,
/// replica 502/503) while attempts and the request's deadline allow.
#[derive(Clone)]
pub struct Retry<S> {
    inner: S,
    max_attempts: u32,
    metrics: Arc<Metrics>,
}

impl<S> Service<Request<Bytes>> for Retry<S>
where
    S: Service<Request<Bytes>, Response = Response<Body>, Error = GatewayError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (max_attempts, metrics) = (self.max_attempts, self.metrics.clone());
        async move {
            let info = request.extensions().get::<Info>().cloned();
            let deadline = info.as_ref().map(|i| i.deadline);
            let mut request = Some(request);
            let mut tried: Vec<String> = Vec::new();
            let mut last_error: Option<GatewayError> = None;
            for attempt in 1..=max_attempts {
                // The last attempt takes the request itself; earlier ones a copy.
                let mut this_try = match &request {
                    Some(original) if attempt < max_attempts => copy(original),
                    _ => request
                        .take()
                        .ok_or_else(|| crate::routing::layer_missing("request"))?,
                };
                if !tried.is_empty() {
                    this_try.extensions_mut().insert(Exclude(tried.clone()));
                }
                futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                let error = match inner.call(this_try).await {
                    Ok(response) => return Ok(response),
                    Err(error) => error,
                };
                let GatewayError::Upstream {
                    retryable: true,
                    replica,
                    ..
                } = &error
                else {
                    // Nothing left to pick after a failure: report that failure, not "no replica".
                    return Err(last_error
                        .filter(|_| replica_exhausted(&error))
                        .unwrap_or(error));
                };
                let in_time = deadline.is_none_or(|d| Instant::now() < d);
                if attempt == max_attempts || !in_time {
                    return Err(error);
                }
                tried.push(replica.clone());
                if let Some(info) = &info {
                    metrics.model(&info.model).retried();
                }
                tracing::info!(%replica, attempt, "retrying on another replica");
                last_error = Some(error);
            }
            Err(last_error.unwrap_or_else(|| crate::routing::layer_missing("attempts")))
        }
        .boxed()
    }
}

/// Whether `error` is the picker's "no replica left to try".
fn replica_exhausted(error: &GatewayError) -> bool {
    matches!(error, GatewayError::Upstream { replica, retryable: false, .. } if replica.is_empty())
}

/// A copy of a buffered request (bodies are `Bytes`: cheap to clone).
fn copy(request: &Request<Bytes>) -> Request<Bytes> {
    let mut copy = Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    copy
}
