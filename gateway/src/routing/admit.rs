//! `Admission<S>`: holds a request until its model has capacity, or answers 503.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::{BoxFuture, Either, FutureExt, Ready, ready};
use http::Response;
use tower::{Layer, Service};

use super::permit::{AdmissionPermit, Entry};
use crate::Body;
use crate::body::{GuardResponse, Guarded};
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::request::Parsed;

/// Layer adding [`Admission`].
#[derive(Clone)]
pub struct AdmissionLayer {
    metrics: Arc<Metrics>,
}

impl AdmissionLayer {
    /// Admits, counting arrivals in `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = Admission<S>;
    fn layer(&self, inner: S) -> Admission<S> {
        Admission {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// Waits for an admission permit of the request's model (priority, then fair share between
/// tenants, then arrival; see [`WaitQueue`](crate::admission::WaitQueue)) and holds it until the
/// response body ends. Every request reaching it has passed its tenant's limits: it counts
/// it as an arrival (the model's offered demand), whether admitted, queued or refused.
#[derive(Clone)]
pub struct Admission<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> Service<Parsed> for Admission<S>
where
    S: Service<Parsed, Response = Response<Body>, Error = GatewayError> + Clone + Send + 'static,
    S::Future: Send + Unpin + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    /// Refused at once; admitted at once (the inner call, holding the permit: no box); or
    /// queued, waiting and then calling, boxed.
    type Future = Either<
        Ready<Result<Response<Body>, GatewayError>>,
        Either<
            GuardResponse<S::Future, AdmissionPermit>,
            BoxFuture<'static, Result<Response<Body>, GatewayError>>,
        >,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        // Admission itself is decided per request, by the model's pool; this is the inner
        // service's readiness, for a request admitted at once.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Parsed) -> Self::Future {
        let started = Instant::now();
        let info = &request.info;
        let tokens = info.estimated_prompt_tokens + info.reserved_output_tokens;
        // A Batch API line is not interactive demand: the autoscaler reads batch work from
        // the batch backlog instead.
        let arrived = |outcome| {
            if request.batch_line {
                return;
            }
            let model = self.metrics.model(&info.model);
            model.arrived(
                outcome,
                info.estimated_prompt_tokens,
                info.reserved_output_tokens,
            );
        };
        let tenant = &request.tenant.name;
        let entry = super::permit::arrive(&request.pool, info.priority, tokens, tenant, arrived);
        let queued = match entry {
            Err(error) => return Either::Left(ready(Err(error))),
            Ok(Entry::Admitted(permit)) => {
                let call = self.inner.call(request);
                return Either::Right(Either::Left(GuardResponse::new(call, permit)));
            }
            Ok(Entry::Queued(queued)) => queued,
        };
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let call = async move {
            let (pool, deadline) = (request.pool.clone(), request.info.deadline);
            let permit = queued.wait(&pool, deadline).await?;
            let queue_wait = started.elapsed();
            futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            let response = inner.call(request).await?;
            // Only a request that waited carries its wait up in its report, on the guard its
            // permit needs anyway (the metrics layer reads none as zero).
            Ok(response.map(|body| Guarded::queued(body, permit, queue_wait)))
        };
        Either::Right(Either::Right(call.boxed()))
    }
}
