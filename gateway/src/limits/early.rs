//! `EarlyLimits<S>`: takes one request from the tenant's tenant-wide bucket
//! (`total_limits.requests_per_minute`) before the body is read, so a tenant over its request
//! rate costs the gateway no body buffering. Token buckets need the body and are taken after
//! it (`Limits`).

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{BoxFuture, Either, FutureExt};
use http::Response;
use tower::{Layer, Service};

use super::limiter::{LimitError, Limiter};
use crate::Body;
use crate::auth::Authed;
use crate::error::GatewayError;
use crate::metrics::Metrics;

/// Layer adding [`EarlyLimits`].
#[derive(Clone)]
pub struct EarlyLimitsLayer {
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
}

impl EarlyLimitsLayer {
    /// Limits against `limiter`, counting refusals in `metrics`.
    pub fn new(limiter: Arc<Limiter>, metrics: Arc<Metrics>) -> Self {
        Self { limiter, metrics }
    }
}

impl<S> Layer<S> for EarlyLimitsLayer {
    type Service = EarlyLimits<S>;
    fn layer(&self, inner: S) -> EarlyLimits<S> {
        EarlyLimits {
            inner,
            limiter: self.limiter.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct EarlyLimits<S> {
    inner: S,
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
}

impl<S, B> Service<Authed<B>> for EarlyLimits<S>
where
    S: Service<Authed<B>, Response = Response<Body>, Error = GatewayError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    /// The inner call itself for a tenant without tenant-wide limits (most): no box.
    type Future = Either<S::Future, BoxFuture<'static, Result<Response<Body>, GatewayError>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Authed<B>) -> Self::Future {
        let tenant = request.tenant.clone();
        if tenant.total_limits.is_none() {
            return Either::Left(self.inner.call(request));
        }
        let (limiter, metrics) = (self.limiter.clone(), self.metrics.clone());
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        async move {
            match limiter.admit_request(&tenant).await {
                Ok(()) => {}
                Err(LimitError::Refused(refusal)) => {
                    metrics.rate_limited(&tenant.name, "", refusal.label());
                    let message = format!(
                        "Rate limit reached across all your models on requests per minute. Please try again in {:.3}s.",
                        refusal.retry_after.as_secs_f64()
                    );
                    return Err(GatewayError::RateLimited {
                        message,
                        headers: Box::new(refusal.headers),
                        retry_after: refusal.retry_after,
                    });
                }
                Err(LimitError::StoreDown) => return Err(super::layer::store_down()),
            }
            futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(request).await
        }
        .boxed()
        .right_future()
    }
}
