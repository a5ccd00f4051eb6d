//! `Limits<S>`: reserves the tenant's buckets once the body is read, refuses with 429, and
//! settles at the end: with the engine's usage, or a refund when the request is dropped before
//! its response started (the client left while it was queued, or it failed).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{BoxFuture, Either, FutureExt, Ready, ready};
use http::Response;
use tower::{Layer, Service};

use super::limiter::{LimitError, Limiter, Reservation, Settle};
use super::plan::{Refusal, Scope};
use crate::Body;
use crate::body::Guarded;
use crate::error::GatewayError;
use crate::metrics::{Metrics, TenantModelUsage};
use crate::request::Parsed;
use crate::vocab::{Info, RateLimitHeaders, Usage};

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
    S::Future: Send + Unpin + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    /// Refused at once; the inner call, settled (the memory store: reserved at once); or,
    /// with Redis, the reservation's round trip and then the inner call, boxed.
    type Future = Either<
        Ready<Result<Response<Body>, GatewayError>>,
        Either<Settling<S::Future>, BoxFuture<'static, Result<Response<Body>, GatewayError>>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Parsed) -> Self::Future {
        let info = &request.info;
        let local = self.limiter.reserve_local(
            &request.tenant,
            &info.model,
            info.estimated_prompt_tokens,
            info.reserved_output_tokens,
        );
        if let Some(reserved) = local {
            return match settling(&self.limiter, &self.metrics, &request, reserved) {
                Ok((settlement, headers)) => Either::Right(Either::Left(Settling::new(
                    self.inner.call(request),
                    settlement,
                    headers,
                ))),
                Err(error) => Either::Left(ready(Err(error))),
            };
        }
        let (limiter, metrics) = (self.limiter.clone(), self.metrics.clone());
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let call = async move {
            let info = &request.info;
            let reserved = limiter
                .reserve(
                    &request.tenant,
                    &info.model,
                    info.estimated_prompt_tokens,
                    info.reserved_output_tokens,
                )
                .await;
            let (settlement, headers) = settling(&limiter, &metrics, &request, reserved)?;
            futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            Settling::new(inner.call(request), settlement, headers).await
        };
        Either::Right(Either::Right(call.boxed()))
    }
}

/// What settles a reservation, or the error of a refused one. Armed before the inner call:
/// a request dropped before its response (its client left while it was queued) drops it,
/// refunding.
fn settling(
    limiter: &Arc<Limiter>,
    metrics: &Metrics,
    request: &Parsed,
    reserved: Result<Option<(Reservation, RateLimitHeaders)>, LimitError>,
) -> Result<(Settlement, Option<RateLimitHeaders>), GatewayError> {
    let (info, tenant) = (&request.info, &request.tenant);
    let reserved = match reserved {
        Ok(reserved) => reserved,
        Err(LimitError::Refused(refusal)) => {
            metrics.rate_limited(&tenant.name, &info.model, refusal.label());
            return Err(refused(refusal, info));
        }
        Err(LimitError::StoreDown) => return Err(store_down()),
    };
    let (reservation, headers) = reserved.unzip();
    let settlement = Settlement {
        limiter: limiter.clone(),
        reservation,
        usage: metrics.tenants.of(&tenant.name, &info.model),
        started: false,
        settled: false,
    };
    Ok((settlement, headers))
}

/// The inner call, then its response with the rate-limit headers and a body that settles
/// the reservation when it ends; a failed call drops the settlement, refunding.
pub struct Settling<F> {
    call: F,
    settlement: Option<(Settlement, Option<RateLimitHeaders>)>,
}

impl<F> Settling<F> {
    fn new(call: F, settlement: Settlement, headers: Option<RateLimitHeaders>) -> Self {
        Self {
            call,
            settlement: Some((settlement, headers)),
        }
    }
}

impl<F> Future for Settling<F>
where
    F: Future<Output = Result<Response<Body>, GatewayError>> + Unpin,
{
    type Output = Result<Response<Body>, GatewayError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut response = std::task::ready!(Pin::new(&mut this.call).poll(cx))?;
        let Some((mut settlement, headers)) = this.settlement.take() else {
            // Polled again after it completed.
            return Poll::Ready(Ok(response));
        };
        if let Some(headers) = headers {
            headers.write(response.headers_mut());
        }
        settlement.started = response.status().is_success();
        Poll::Ready(Ok(response.map(|body| {
            Guarded::settle_with(body, settlement, |mut settlement, report| {
                settlement.settle(report.usage)
            })
        })))
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
