//! `Fallback<S>`: a request for a route tries its models in order — on a tenant limit's 429,
//! on no capacity within its share of the deadline, or on a failed upstream — and the answer
//! names the model that served it.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt};
use http::{HeaderValue, Response};
use tokenscale_common::headers;
use tower::{Layer, Service};

use crate::Body;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::request::Parsed;
use crate::routing::Router;

/// The rest of a route's order for one request (set by the parse layer).
#[derive(Debug, Clone)]
pub struct Fallbacks {
    /// The route the client named.
    pub route: Arc<str>,
    /// Models to try after the current one, in order (the tenant may use each).
    pub next: Vec<String>,
}

/// Layer adding [`Fallback`].
#[derive(Clone)]
pub struct FallbackLayer {
    router: Arc<Router>,
    metrics: Arc<Metrics>,
}

impl FallbackLayer {
    /// Falls back among `router`'s models, counted in `metrics`.
    pub fn new(router: Arc<Router>, metrics: Arc<Metrics>) -> Self {
        Self { router, metrics }
    }
}

impl<S> Layer<S> for FallbackLayer {
    type Service = Fallback<S>;
    fn layer(&self, inner: S) -> Fallback<S> {
        Fallback {
            inner,
            router: self.router.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// Sits below the parse layer and above everything that is per model (metrics, limits,
/// admission, failover), so every attempt is that model's own request: its limits, its
/// queue, its latency. A request that is not for a route passes through; every answer
/// carries `x-tokenscale-model`.
#[derive(Clone)]
pub struct Fallback<S> {
    inner: S,
    router: Arc<Router>,
    metrics: Arc<Metrics>,
}

/// Why a route moves on to its next model (the `reason` label), or `None` when the failure
/// is the request's own and another model would fail it the same way.
pub fn fallback_reason(error: &GatewayError) -> Option<&'static str> {
    match error {
        GatewayError::RateLimited { .. } => Some("rate_limited"),
        GatewayError::Overloaded { .. } | GatewayError::NoReplicaLeft { .. } => Some("no_capacity"),
        GatewayError::Upstream { .. } | GatewayError::UpstreamTimeout { .. } => Some("upstream"),
        _ => None,
    }
}

impl<S> Service<Parsed> for Fallback<S>
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

    fn call(&mut self, mut parsed: Parsed) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (router, metrics) = (self.router.clone(), self.metrics.clone());
        let Some(fallbacks) = parsed.route.take() else {
            let model = parsed.info.model.clone();
            return call(inner, parsed)
                .map(move |answer| answer.map(|response| named(response, &model)))
                .boxed();
        };
        let tries = Tries {
            router,
            metrics,
            fallbacks,
        };
        tries.run(inner, parsed).boxed()
    }
}

async fn call<S>(mut inner: S, parsed: Parsed) -> Result<Response<Body>, GatewayError>
where
    S: Service<Parsed, Response = Response<Body>, Error = GatewayError>,
{
    futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
    inner.call(parsed).await
}

/// One route request's walk through its models.
struct Tries {
    router: Arc<Router>,
    metrics: Arc<Metrics>,
    fallbacks: Fallbacks,
}

impl Tries {
    async fn run<S>(self, inner: S, template: Parsed) -> Result<Response<Body>, GatewayError>
    where
        S: Service<Parsed, Response = Response<Body>, Error = GatewayError> + Clone,
    {
        let route = self.fallbacks.route.clone();
        let mut next = self.fallbacks.next.iter();
        let mut pool = template.pool.clone();
        // The 429 to answer if every model refused on a tenant limit: the soonest to pass.
        let mut soonest_limit: Option<GatewayError> = None;
        loop {
            let left = next.len();
            let attempt = template.retarget(pool.clone(), share_of_deadline(&template, left))?;
            let error = match call(inner.clone(), attempt).await {
                Ok(response) => {
                    self.metrics.route_served(&route, &pool.name);
                    return Ok(named(response, &pool.name));
                }
                Err(error) => error,
            };
            let Some(reason) = fallback_reason(&error) else {
                return Err(error);
            };
            let to = next.by_ref().find_map(|name| self.router.model(name));
            let to_name = to.as_ref().map_or("none", |p| p.name.as_str());
            self.metrics
                .route_fallback(&route, &pool.name, to_name, reason);
            tracing::info!(route = &*route, from = %pool.name, to = to_name, reason, "route fallback");
            let limited = matches!(error, GatewayError::RateLimited { .. });
            let last = if limited {
                soonest_limit = Some(sooner(soonest_limit.take(), error));
                None
            } else {
                Some(error)
            };
            match to {
                Some(to) => pool = to,
                // Every model refused on a tenant limit: the 429 that passes soonest; else
                // the last model's own answer.
                None => {
                    return Err(last
                        .or(soonest_limit)
                        .unwrap_or(GatewayError::NoReplicaLeft {
                            model: route.to_string(),
                        }));
                }
            }
        }
    }
}

/// How long this try may wait for capacity: the time left split evenly over it and the
/// `after` models still to try, so the last one still has its share; the last try gets all
/// that is left.
fn share_of_deadline(template: &Parsed, after: usize) -> Instant {
    let now = Instant::now();
    let left = template.info.deadline.saturating_duration_since(now);
    let tries = u32::try_from(after + 1).unwrap_or(u32::MAX);
    now + left / tries
}

/// Of two 429s, the one whose limit passes sooner.
fn sooner(current: Option<GatewayError>, new: GatewayError) -> GatewayError {
    let retry = |e: &GatewayError| match e {
        GatewayError::RateLimited { retry_after, .. } => *retry_after,
        _ => Duration::MAX,
    };
    match current {
        Some(current) if retry(&current) <= retry(&new) => current,
        _ => new,
    }
}

/// Adds the header naming the model that answered.
fn named(mut response: Response<Body>, model: &str) -> Response<Body> {
    if let Ok(value) = HeaderValue::from_str(model) {
        response.headers_mut().insert(headers::MODEL, value);
    }
    response
}
