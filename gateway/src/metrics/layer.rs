//! `Observe<S>`: latency and outcome of each request as the client sees it, and one
//! `tokenscale::usage` log line per finished request (its tokens, times, status and replica).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use http::{HeaderValue, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokenscale_common::headers;
use tower::{Layer, Service};

use super::{Metrics, ModelMetrics};
use crate::Body;
use crate::body::Reporting;
use crate::error::{BoxError, GatewayError};
use crate::request::Parsed;
use crate::routing::ModelPool;
use crate::vocab::{Info, Report};

/// Layer adding [`Observe`].
#[derive(Clone)]
pub struct MetricsLayer {
    metrics: Arc<Metrics>,
}

impl MetricsLayer {
    /// Records into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = Observe<S>;
    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// Counts every request by status; for successful ones, times the first generated content
/// and the last byte the client gets (queueing included) and adds the engine's usage to the counters.
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> Service<Parsed> for Observe<S>
where
    S: Service<Parsed, Response = Response<Body>, Error = GatewayError> + Send,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Parsed) -> Self::Future {
        let info = request.info.clone();
        let tenant = request.tenant.name.clone();
        let pool = request.pool.clone();
        let model = self.metrics.model(&info.model);
        let call = self.inner.call(request);
        async move {
            match call.await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let queue_wait = response.body().report().queue_wait.unwrap_or_default();
                    let replica = response.headers().get(UPSTREAM).cloned();
                    Ok(response.map(|inner| {
                        Body::reporting(Observed {
                            inner,
                            info,
                            tenant,
                            replica,
                            queue_wait,
                            model,
                            pool,
                            status,
                            done: false,
                        })
                    }))
                }
                Err(error) => {
                    let status = error.status().as_u16();
                    model.finished(status);
                    log_finished(&tenant, &info, status, Report::default(), None);
                    Err(error)
                }
            }
        }
        .boxed()
    }
}

/// Names the replica that answered (set by the upstream service on its responses).
const UPSTREAM: http::HeaderName = http::HeaderName::from_static(headers::UPSTREAM);

/// The `tokenscale::usage` line of a finished request: "log tokens per call and you can see
/// which limit you hit". Tokens are the engine's usage (none for a request that failed before
/// its answer), input as the input limit charges it (uncached) and cached apart, as in the
/// usage report; `ttft_ms` only for a stream that sent content.
fn log_finished(
    tenant: &str,
    info: &Info,
    status: u16,
    report: Report,
    replica: Option<&HeaderValue>,
) {
    let usage = report.usage.unwrap_or_default();
    let ttft_ms = report
        .first_content
        .filter(|_| info.stream)
        .map(|first| first.duration_since(info.arrival).as_millis() as u64);
    tracing::info!(
        target: "tokenscale::usage",
        tenant,
        model = %info.model,
        input_tokens = usage.prompt_tokens.saturating_sub(usage.cached_tokens),
        cached_tokens = usage.cached_tokens,
        output_tokens = usage.completion_tokens,
        ttft_ms,
        total_ms = info.arrival.elapsed().as_millis() as u64,
        status,
        replica = replica.and_then(|r| r.to_str().ok()),
        "request finished"
    );
}

/// The response body, timed.
struct Observed {
    inner: Body,
    info: Info,
    /// Whose request, and the replica that answered it, for the usage log line.
    tenant: Arc<str>,
    replica: Option<HeaderValue>,
    /// Time in the admission queue (the admission layer puts it on the response).
    queue_wait: Duration,
    model: Arc<ModelMetrics>,
    /// The model's pool: the replica's adaptive cap learns from the answer.
    pool: Arc<ModelPool>,
    status: u16,
    done: bool,
}

impl Observed {
    fn finish(&mut self, status: u16) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let now = Instant::now();
        let m = &self.model;
        m.finished(status);
        // What the proxy learned of the answer comes back with its body.
        let report = self.inner.report();
        log_finished(
            &self.tenant,
            &self.info,
            status,
            report.clone(),
            self.replica.as_ref(),
        );
        if !(200..300).contains(&status) {
            return;
        }
        // The replica that ended the answer: a stream's last (failover), else the one named.
        let replica = report
            .replica
            .as_deref()
            .or(self.replica.as_ref().and_then(|r| r.to_str().ok()));
        if let Some(url) = replica {
            self.pool.served(url, &report, self.info.arrival);
        }
        m.e2e
            .observe(now.duration_since(self.info.arrival).as_secs_f64());
        m.queue_time.observe(self.queue_wait.as_secs_f64());
        let usage = report.usage;
        if let Some(usage) = usage {
            m.tokens(usage);
            m.usage_source(report.estimated);
        }
        if !self.info.stream {
            return;
        }
        // Timed from the first generated content the proxy sent (see `Report`), not from the
        // first bytes: a chat stream's role chunk leaves before prefill.
        if let Some(first) = report.first_content {
            m.ttft
                .observe(first.duration_since(self.info.arrival).as_secs_f64());
            let tokens = usage.map_or(0, |u| u.completion_tokens);
            if tokens >= 2 && status != 499 {
                m.tpot
                    .observe(now.duration_since(first).as_secs_f64() / (tokens - 1) as f64);
            }
        }
    }
}

impl HttpBody for Observed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => {
                if this.inner.is_end_stream() {
                    this.finish(this.status);
                }
            }
            Poll::Ready(None) => this.finish(this.status),
            Poll::Ready(Some(Err(_))) => this.finish(502),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Reporting for Observed {
    fn report(&self) -> Report {
        self.inner.report()
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        // Dropped before its end: the client went away.
        self.finish(499);
    }
}
