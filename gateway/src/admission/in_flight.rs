//! `InFlight<S>`: caps the requests one gateway pod holds at once (503 past it) and each
//! tenant's share of its own cap (429 past it), counted from the headers to the response's
//! end, before the body is read: a flood can hold neither memory nor slots without bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{Either, Ready, ready};
use hashbrown::HashMap;
use http::Response;
use tower::{Layer, Service};

use crate::Body;
use crate::auth::{Authed, Tenant};
use crate::body::GuardResponse;
use crate::error::GatewayError;
use crate::metrics::Metrics;
use crate::vocab::{GatewayShare, RateLimitHeaders};

/// The pod's and the tenants' in-flight counts.
#[derive(Debug)]
pub struct InFlightCounts {
    max: usize,
    pod: AtomicUsize,
    tenants: Mutex<HashMap<Arc<str>, usize>>,
    share: Arc<GatewayShare>,
}

/// One request counted in flight, until dropped.
#[derive(Debug)]
pub struct InFlightGuard {
    counts: Arc<InFlightCounts>,
    tenant: Option<Arc<str>>,
}

/// Which cap refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlightRefusal {
    /// The pod's `bounds.max_in_flight`.
    Pod(usize),
    /// The tenant's `max_in_flight` (this pod's share of it).
    Tenant(u64),
}

impl InFlightCounts {
    /// Counts up to `max` requests on this pod; tenants' caps are split by `share`.
    pub fn new(max: usize, share: Arc<GatewayShare>) -> Self {
        Self {
            max,
            pod: AtomicUsize::new(0),
            tenants: Mutex::default(),
            share,
        }
    }

    /// Requests in flight on this pod.
    pub fn in_flight(&self) -> usize {
        self.pod.load(Ordering::Relaxed)
    }

    /// Counts a request of `tenant`, or says which cap it is over.
    pub fn enter(self: &Arc<Self>, tenant: &Tenant) -> Result<InFlightGuard, InFlightRefusal> {
        if self.pod.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.pod.fetch_sub(1, Ordering::AcqRel);
            return Err(InFlightRefusal::Pod(self.max));
        }
        let mut guard = InFlightGuard {
            counts: self.clone(),
            tenant: None,
        };
        if let Some(cap) = tenant.max_in_flight {
            let cap = self.share.of(u64::from(cap)).max(1);
            let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
            let count = tenants.entry(tenant.name.clone()).or_default();
            if *count as u64 >= cap {
                return Err(InFlightRefusal::Tenant(cap));
            }
            *count += 1;
            guard.tenant = Some(tenant.name.clone());
        }
        Ok(guard)
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.counts.pod.fetch_sub(1, Ordering::AcqRel);
        if let Some(tenant) = &self.tenant {
            let mut tenants = self
                .counts
                .tenants
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(count) = tenants.get_mut(tenant) {
                *count -= 1;
                if *count == 0 {
                    tenants.remove(tenant);
                }
            }
        }
    }
}

/// Layer adding [`InFlight`].
#[derive(Clone)]
pub struct InFlightLayer {
    counts: Arc<InFlightCounts>,
    metrics: Arc<Metrics>,
}

impl InFlightLayer {
    /// Counts into `counts`, refusals into `metrics`.
    pub fn new(counts: Arc<InFlightCounts>, metrics: Arc<Metrics>) -> Self {
        Self { counts, metrics }
    }
}

impl<S> Layer<S> for InFlightLayer {
    type Service = InFlight<S>;
    fn layer(&self, inner: S) -> InFlight<S> {
        InFlight {
            inner,
            counts: self.counts.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct InFlight<S> {
    inner: S,
    counts: Arc<InFlightCounts>,
    metrics: Arc<Metrics>,
}

impl<S, B> Service<Authed<B>> for InFlight<S>
where
    S: Service<Authed<B>, Response = Response<Body>, Error = GatewayError> + Send,
    S::Future: Send + Unpin + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = Either<
        Ready<Result<Response<Body>, GatewayError>>,
        GuardResponse<S::Future, InFlightGuard>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Authed<B>) -> Self::Future {
        let tenant = &request.tenant;
        let guard = match self.counts.enter(tenant) {
            Ok(guard) => guard,
            Err(refusal) => {
                let error = refused(refusal);
                if matches!(refusal, InFlightRefusal::Tenant(_)) {
                    self.metrics.rate_limited(&tenant.name, "", "in_flight");
                }
                return Either::Left(ready(Err(error)));
            }
        };
        Either::Right(GuardResponse::new(self.inner.call(request), guard))
    }
}

/// The answer to a refusal: 503 at the pod's cap, 429 at the tenant's.
pub fn refused(refusal: InFlightRefusal) -> GatewayError {
    match refusal {
        InFlightRefusal::Pod(max) => GatewayError::Overloaded {
            message: format!("The gateway has {max} requests in flight, its limit; retry shortly."),
            retry_after: Duration::from_secs(1),
        },
        InFlightRefusal::Tenant(cap) => GatewayError::RateLimited {
            message: format!(
                "Too many requests in flight for your key: at most {cap} at once on this gateway; wait for some to finish."
            ),
            headers: Box::new(RateLimitHeaders::default()),
            retry_after: Duration::from_secs(1),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_and_tenant_caps_count_until_the_guard_drops() {
        let counts = Arc::new(InFlightCounts::new(3, Arc::default()));
        let mut capped = Tenant::unlimited("a");
        capped.max_in_flight = Some(2);
        let open = Tenant::unlimited("b");
        let first = counts.enter(&capped).expect("1 of 2");
        let _second = counts.enter(&capped).expect("2 of 2");
        assert_eq!(
            counts.enter(&capped).err(),
            Some(InFlightRefusal::Tenant(2))
        );
        let _third = counts.enter(&open).expect("pod 3 of 3");
        assert_eq!(counts.enter(&open).err(), Some(InFlightRefusal::Pod(3)));
        drop(first);
        assert_eq!(counts.in_flight(), 2);
        assert!(counts.enter(&capped).is_ok());
    }

    #[test]
    fn a_tenants_cap_is_split_between_gateway_pods() {
        let share = Arc::new(GatewayShare::default());
        share.set(2, 1);
        let counts = Arc::new(InFlightCounts::new(100, share));
        let mut tenant = Tenant::unlimited("a");
        tenant.max_in_flight = Some(5);
        let held: Vec<_> = (0..2)
            .map(|_| counts.enter(&tenant).expect("share"))
            .collect();
        assert_eq!(
            counts.enter(&tenant).err(),
            Some(InFlightRefusal::Tenant(2))
        );
        drop(held);
    }
}
