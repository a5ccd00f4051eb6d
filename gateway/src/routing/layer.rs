//! `Pick<S>`: leases a replica for the request and keeps it counted until the response ends.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use http::Response;
use tower::{Layer, Service};

use super::Replica;
use crate::Body;
use crate::body::GuardResponse;
use crate::error::GatewayError;
use crate::request::Parsed;

/// A request and the replica picked for this attempt: what the upstream call takes.
#[derive(Debug)]
pub struct Routed {
    /// The request.
    pub request: Parsed,
    /// Where it goes.
    pub replica: Arc<Replica>,
}

/// Layer adding [`Pick`].
#[derive(Debug, Clone, Default)]
pub struct PickLayer;

impl<S> Layer<S> for PickLayer {
    type Service = Pick<S>;
    fn layer(&self, inner: S) -> Pick<S> {
        Pick { inner }
    }
}

/// Picks a ready replica (load, prefix affinity, power of two choices), counts the request
/// on it, and releases the count when the response body ends or is dropped.
#[derive(Debug, Clone)]
pub struct Pick<S> {
    inner: S,
}

impl<S> Service<Parsed> for Pick<S>
where
    S: Service<Routed, Response = Response<Body>, Error = GatewayError> + Send,
    S::Future: Send + Unpin + 'static,
{
    type Response = Response<Body>;
    type Error = GatewayError;
    type Future = Either<
        Ready<Result<Response<Body>, GatewayError>>,
        GuardResponse<S::Future, super::ReplicaLease>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Parsed) -> Self::Future {
        let (info, pool) = (&request.info, &request.pool);
        let tokens = info.estimated_prompt_tokens + info.reserved_output_tokens;
        let Some(lease) = pool.pick(
            info.prefix_hash,
            info.adapter.as_deref(),
            tokens,
            &request.exclude,
        ) else {
            let error = GatewayError::NoReplicaLeft {
                model: pool.name.clone(),
            };
            return Either::Left(ready(Err(error)));
        };
        let replica = lease.replica.clone();
        let call = self.inner.call(Routed { request, replica });
        Either::Right(GuardResponse::new(call, lease))
    }
}

pub fn missing(what: &str) -> GatewayError {
    GatewayError::LayerMissing(what.to_string())
}
