//! `Admission<S>`: holds a request until its model has capacity, or answers 503.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt};
use http::Response;
use tower::{Layer, Service};

use crate::Body;
use crate::body::Guarded;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::request::Parsed;

/// How long a request waited in the admission queue: put on the response of one that waited,
/// for the metrics layer above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueWait(pub Duration);

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
/// tenants, then arrival; see [`WaitQueue`](super::WaitQueue)) and holds it until the
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
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        // Readiness is decided per request, by the model's pool.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Parsed) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let metrics = self.metrics.clone();
        async move {
            let (info, pool) = (request.info.clone(), request.pool.clone());
            let tenant = request.tenant.name.clone();
            let started = Instant::now();
            let tokens = info.estimated_prompt_tokens + info.reserved_output_tokens;
            let model = metrics.model(&info.model);
            // A Batch API line is not interactive demand: the autoscaler reads batch work
            // from the batch backlog instead.
            let batch_line = request.batch_line;
            let arrived = |outcome| {
                if batch_line {
                    return;
                }
                model.arrived(
                    outcome,
                    info.estimated_prompt_tokens,
                    info.reserved_output_tokens,
                );
            };
            let permit = super::admit(
                &pool,
                info.priority,
                info.deadline,
                tokens,
                &tenant,
                arrived,
            )
            .await?;
            // Only a request that waited carries its wait up (the metrics layer reads none as
            // zero): an extension costs two allocations, on every response otherwise.
            let queue_wait = permit.queued().then(|| QueueWait(started.elapsed()));
            futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            let mut response = inner.call(request).await?;
            if let Some(queue_wait) = queue_wait {
                response.extensions_mut().insert(queue_wait);
            }
            Ok(response.map(|body| Guarded::wrap(body, permit)))
        }
        .boxed()
    }
}
