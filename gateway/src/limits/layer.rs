//! `Limits<S>`: reserves the tenant's buckets once the body is read, refuses with 429, and
//! settles at the end: with the engine's usage, or a refund when the request is dropped before
//! its response started (the client left while it was queued, or it failed).

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{BoxFuture, FutureExt};
use http::Response;
use tower::{Layer, Service};

use super::limiter::{LimitError, Limiter, Reservation, Settle};
use super::plan::{Refusal, Scope};
use crate::Body;
use crate::body::Guarded;
use crate::error::GatewayError;
use crate::metrics::{Metrics, TenantModelUsage};
use crate::request::{Info, Parsed, Usage};

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

/// Settles a reservation: at the end of the response body, with the usage the body reports
/// (the engine's, else the gateway's count); else a refund unless a successful response had
/// started (then the client left mid-stream, and the engine may have done all the work: the
/// reservation stays charged). Dropped without a response (the client left while the request
/// was queued, or it failed), it refunds. The tenant's usage counters on the model are added
/// to at the same time.
struct Settlement {
    limiter: Arc<Limiter>,
    reservation: Option<Reservation>,
    usage: Arc<TenantModelUsage>,
    started: bool,
    settled: bool,
}

impl Settlement {
    /// Settles with `usage` (`None`: none was reported).
    fn settle(&mut self, usage: Option<Usage>) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        self.usage.finished(usage);
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        let how = match (self.started, usage) {
            (_, Some(usage)) => Settle::Usage(usage),
            (true, None) => Settle::Unknown,
            (false, None) => Settle::Failed,
        };
        self.limiter.settle(reservation, how);
    }
}

impl Drop for Settlement {
    fn drop(&mut self) {
        self.settle(None);
    }
}

impl<S> Service<Parsed> for Limits<S>
where
    S: Service<Parsed, Response = Response<Body>, Error = GatewayError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Parsed) -> Self::Future {
        let (info, tenant) = (request.info.clone(), request.tenant.clone());
        let limiter = self.limiter.clone();
        let metrics = self.metrics.clone();
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        async move {
            let reserved = limiter
                .reserve(
                    &tenant,
                    &info.model,
                    info.estimated_prompt_tokens,
                    info.reserved_output_tokens,
                )
                .await;
            let reserved = match reserved {
                Ok(reserved) => reserved,
                Err(LimitError::Refused(refusal)) => {
                    metrics.rate_limited(&tenant.name, &info.model, refusal.label());
                    return Err(refused(refusal, &info));
                }
                Err(LimitError::StoreDown) => return Err(store_down()),
            };
            let (reservation, headers) = reserved.unzip();
            // Armed before waiting: a client that leaves while queued drops it, refunding.
            let mut settlement = Settlement {
                limiter,
                reservation,
                usage: metrics.tenants.of(&tenant.name, &info.model),
                started: false,
                settled: false,
            };
            futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            let mut response = inner.call(request).await?;
            if let Some(headers) = headers {
                headers.write(response.headers_mut());
            }
            settlement.started = response.status().is_success();
            Ok(response.map(|body| {
                Guarded::settle_with(body, settlement, |mut settlement, report| {
                    settlement.settle(report.usage)
                })
            }))
        }
        .boxed()
    }
}

/// The 503 of `on_store_failure: deny` while Redis is unreachable.
pub fn store_down() -> GatewayError {
    GatewayError::Overloaded {
        message: "Rate limits cannot be checked right now (the limits store is unreachable); retry shortly.".into(),
        retry_after: std::time::Duration::from_secs(1),
    }
}

/// The 429 for `refusal`, naming the limit and whose it is.
pub fn refused(refusal: Refusal, info: &Info) -> GatewayError {
    let what = refusal.limit.as_str().replace('_', " ");
    let whose = match refusal.scope {
        Scope::Model => format!("for model `{}`", info.model),
        Scope::Tenant => "across all your models".to_string(),
    };
    let message = if refusal.too_large {
        format!(
            "Request too large {whose}: it needs more {what} (estimated {} prompt, {} output tokens) than the per-minute limit allows.",
            info.estimated_prompt_tokens, info.reserved_output_tokens
        )
    } else {
        format!(
            "Rate limit reached {whose} on {what} per minute. Please try again in {:.3}s.",
            refusal.retry_after.as_secs_f64()
        )
    };
    GatewayError::RateLimited {
        message,
        headers: Box::new(refusal.headers),
        retry_after: refusal.retry_after,
    }
}
