//! `Pick<S>`: leases a replica for the request and keeps it counted until the response ends.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{BoxFuture, FutureExt};
use http::{Request, Response};
use tower::{Layer, Service};

use super::{ModelPool, Replica};
use crate::Body;
use crate::body::Guarded;
use crate::error::GatewayError;
use crate::request::Info;

/// Replica URLs already tried by this request (set by the retry layer).
#[derive(Debug, Clone, Default)]
pub struct Exclude(pub Vec<String>);

/// The replica picked for this attempt (read by the upstream call).
#[derive(Debug, Clone)]
pub struct Picked(pub Arc<Replica>);

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

impl<S> Service<Request<bytes::Bytes>> for Pick<S>
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

    fn call(&mut self, mut request: Request<bytes::Bytes>) -> Self::Future {
        let (Some(info), Some(pool)) = (
            request.extensions().get::<Info>().cloned(),
            request.extensions().get::<Arc<ModelPool>>().cloned(),
        ) else {
            return futures::future::ready(Err(missing("request info"))).boxed();
        };
        let exclude = request
            .extensions()
            .get::<Exclude>()
            .map(|e| e.0.as_slice())
            .unwrap_or(&[]);
        let tokens = info.estimated_prompt_tokens + info.reserved_output_tokens;
        let Some(lease) = pool.pick(info.prefix_hash, tokens, exclude) else {
            let error = GatewayError::NoReplicaLeft {
                model: pool.name.clone(),
            };
            return futures::future::ready(Err(error)).boxed();
        };
        request
            .extensions_mut()
            .insert(Picked(lease.replica.clone()));
        let call = self.inner.call(request);
        async move {
            let response = call.await?;
            Ok(response.map(|body| Guarded::wrap(body, lease)))
        }
        .boxed()
    }
}

pub fn missing(what: &str) -> GatewayError {
    GatewayError::LayerMissing(what.to_string())
}
