//! `Failover<S>`: nothing a replica does wrong loses a request. Before any byte reached the
//! client, a failed attempt (connect error, reset, timeout, a replica's 502/503/504, a stream
//! that sent nothing) is sent again to another replica. After, a stream that breaks continues
//! on another replica: see [`splice`] (what the client gets), [`continuation`] (what the next
//! replica is asked) and [`body`] (the async shell between them). It sits above the picker,
//! so each attempt and each continuation is picked afresh.

mod ask;
mod body;
mod chunk;
mod continuation;
mod reshape;
mod splice;
mod token_prompt;

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::{BoxFuture, FutureExt};
use http::Response;
use tower::{Layer, Service};

use crate::Body;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::request::Parsed;
use crate::routing::layer_missing as missing;
use crate::vocab::Info;
pub use ask::ask_token_ids;
pub use body::{Reissue, Resend, Resuming};
pub use continuation::{Api, derived_seed};
pub use splice::{Continuation, Plan, Shape, Splice, Step};

/// How many times a request may go to another replica.
#[derive(Debug, Clone, Copy)]
pub struct FailoverSettings {
    /// Attempts before any byte reached the client (the first plus retries), and per
    /// continuation.
    pub max_attempts: u32,
    /// Continuations of a broken stream per request.
    pub max_resumptions: u32,
}

/// Layer adding [`Failover`].
#[derive(Clone)]
pub struct FailoverLayer {
    settings: FailoverSettings,
    metrics: Arc<Metrics>,
}

impl FailoverLayer {
    /// Retries and continuations within `settings`, counted in `metrics`.
    pub fn new(settings: FailoverSettings, metrics: Arc<Metrics>) -> Self {
        Self { settings, metrics }
    }
}

impl<S> Layer<S> for FailoverLayer {
    type Service = Failover<S>;
    fn layer(&self, inner: S) -> Failover<S> {
        Failover {
            inner,
            settings: self.settings,
            metrics: self.metrics.clone(),
        }
    }
}

/// Retries unstarted requests and continues broken streams on other replicas.
#[derive(Clone)]
pub struct Failover<S> {
    inner: S,
    settings: FailoverSettings,
    metrics: Arc<Metrics>,
}

impl<S> Service<Parsed> for Failover<S>
where
    S: Service<Parsed, Response = Response<Body>, Error = GatewayError>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = BoxFuture<'static, Result<Response<Body>, GatewayError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Parsed) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (settings, metrics) = (self.settings, self.metrics.clone());
        async move {
            let info = request.info.clone();
            let template = info.stream.then(|| request.copy());
            let response = retry(inner.clone(), request, &info, settings, &metrics).await?;
            let (Some(template), true) = (template, response.status().is_success()) else {
                return Ok(response);
            };
            let replica = upstream_of(&response);
            let resend = Resend {
                reissue: reissue(inner),
                template,
                max_attempts: settings.max_attempts,
                max_resumptions: settings.max_resumptions,
            };
            Ok(response
                .map(|body| Body::reporting(Resuming::new(body, replica, resend, info, metrics))))
        }
        .boxed()
    }
}

/// Calls `inner` until an attempt succeeds, fails for a reason another replica would share,
/// or attempts or the deadline run out; each retry goes to a replica not yet tried.
async fn retry<S>(
    mut inner: S,
    request: Parsed,
    info: &Info,
    settings: FailoverSettings,
    metrics: &Metrics,
) -> Result<Response<Body>, GatewayError>
where
    S: Service<Parsed, Response = Response<Body>, Error = GatewayError>,
{
    let max_attempts = settings.max_attempts.max(1);
    let mut request = Some(request);
    let mut tried: Vec<String> = Vec::new();
    let mut last_error: Option<GatewayError> = None;
    for attempt in 1..=max_attempts {
        // The last attempt takes the request itself; earlier ones a copy.
        let mut this_try = match &request {
            Some(original) if attempt < max_attempts => original.copy(),
            _ => request.take().ok_or_else(|| missing("request"))?,
        };
        this_try.exclude.clone_from(&tried);
        futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
        let error = match inner.call(this_try).await {
            Ok(response) => return Ok(response),
            Err(error) => error,
        };
        if !error.is_retryable() {
            // Nothing left to pick after a failure: report that failure, not "no replica".
            return Err(last_error
                .filter(|_| replica_exhausted(&error))
                .unwrap_or(error));
        }
        let in_time = Instant::now() < info.deadline;
        if attempt == max_attempts || !in_time {
            return Err(error);
        }
        tried.extend(error.replica().map(str::to_string));
        metrics.model(&info.model).retried();
        tracing::info!(
            replica = error.replica().unwrap_or(""),
            attempt,
            "retrying on another replica"
        );
        last_error = Some(error);
    }
    Err(last_error.unwrap_or_else(|| missing("attempts")))
}

/// Sends continuations through `inner` (the picker and the upstream call).
fn reissue<S>(inner: S) -> Reissue
where
    S: Service<Parsed, Response = Response<Body>, Error = GatewayError>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    Arc::new(move |request| {
        let mut inner = inner.clone();
        async move {
            futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(request).await
        }
        .boxed()
    })
}

/// The replica that answered, as the upstream call named it; `None` from an inner service
/// that names none (nothing is excluded for it then).
fn upstream_of(response: &Response<Body>) -> Option<String> {
    response
        .body()
        .report()
        .replica
        .as_deref()
        .map(str::to_string)
}

/// Whether `error` is the picker's "no replica left to try".
fn replica_exhausted(error: &GatewayError) -> bool {
    matches!(error, GatewayError::NoReplicaLeft { .. })
}
