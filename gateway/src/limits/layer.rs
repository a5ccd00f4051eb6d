//! `Limits<S>`: reserves the tenant's buckets on arrival, refuses with 429, settles at the end.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::{BoxFuture, FutureExt};
use http::{Request, Response};
use tower::{Layer, Service};

use super::limiter::{Limiter, Refusal, Reservation, Settle};
use crate::Body;
use crate::auth::Tenant;
use crate::body::Guarded;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::request::Info;
use crate::routing::layer_missing as missing;

/// Layer adding [`Limits`].
#[derive(Clone)]
pub struct LimitsLayer {
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
}

impl LimitsLayer {
    /// Limits against `limiter`, counting refusals in `metrics`.
    pub fn new(limiter: Arc<Limiter>, metrics: Arc<Metrics>) -> Self {
        Self { limiter, metrics }
    }
}

impl<S> Layer<S> for LimitsLayer {
    type Service = Limits<S>;
    fn layer(&self, inner: S) -> Limits<S> {
        Limits {
            inner,
            limiter: self.limiter.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// Applies the tenant's RPM / input-TPM / output-TPM on the request's model.
#[derive(Clone)]
pub struct Limits<S> {
    inner: S,
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
}

/// Settles a reservation when the response ends (dropped with the body).
struct Settlement {
    limiter: Arc<Limiter>,
    reservation: Reservation,
    info: Info,
    success: bool,
}

impl Drop for Settlement {
    fn drop(&mut self) {
        let how = match (self.success, self.info.outcome.usage()) {
            (_, Some(usage)) => Settle::Usage(usage),
            (true, None) => Settle::Unknown,
            (false, None) => Settle::Failed,
        };
        self.limiter.settle(&self.reservation, how, Instant::now());
    }
}

impl<S> Service<Request<bytes::Bytes>> for Limits<S>
where
    S: Service<Request<bytes::Bytes>, Response = Response<Body>, Error = GatewayError> + Send,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<bytes::Bytes>) -> Self::Future {
        let (Some(info), Some(tenant)) = (
            request.extensions().get::<Info>().cloned(),
            request.extensions().get::<Arc<Tenant>>().cloned(),
        ) else {
            return futures::future::ready(Err(missing("tenant or info"))).boxed();
        };
        let reserved = self.limiter.reserve(
            &tenant,
            &info.model,
            info.estimated_prompt_tokens,
            info.reserved_output_tokens,
            Instant::now(),
        );
        let reserved = match reserved {
            Ok(reserved) => reserved,
            Err(refusal) => {
                self.metrics
                    .rate_limited(&tenant.name, &info.model, refusal.limit.as_str());
                return futures::future::ready(Err(refused(refusal, &info))).boxed();
            }
        };
        let call = self.inner.call(request);
        let limiter = self.limiter.clone();
        async move {
            let result = call.await;
            let Some((reservation, headers)) = reserved else {
                return result;
            };
            match result {
                Ok(mut response) => {
                    headers.write(response.headers_mut());
                    let success = response.status().is_success();
                    let settlement = Settlement {
                        limiter,
                        reservation,
                        info,
                        success,
                    };
                    Ok(response.map(|body| Guarded::wrap(body, settlement)))
                }
                Err(error) => {
                    drop(Settlement {
                        limiter,
                        reservation,
                        info,
                        success: false,
                    });
                    Err(error)
                }
            }
        }
        .boxed()
    }
}

fn refused(refusal: Refusal, info: &Info) -> GatewayError {
    let what = refusal.limit.as_str().replace('_', " ");
    let message = if refusal.too_large {
        format!(
            "Request too large for model `{}`: it needs more {what} (estimated {} prompt, {} output tokens) than the per-minute limit allows.",
            info.model, info.estimated_prompt_tokens, info.reserved_output_tokens
        )
    } else {
        format!(
            "Rate limit reached for model `{}` on {what} per minute. Please try again in {:.3}s.",
            info.model,
            refusal.retry_after.as_secs_f64()
        )
    };
    GatewayError::RateLimited {
        message,
        headers: Box::new(refusal.headers),
        retry_after: refusal.retry_after,
    }
}
