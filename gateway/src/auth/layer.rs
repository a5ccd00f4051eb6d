//! `Auth<S>`: finds the tenant from `Authorization: Bearer` or `x-api-key`, or refuses (401).

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use http::Request;
use tokenscale_common::headers;
use tower::{Layer, Service};

use super::TenantDirectory;
use crate::error::GatewayError;

/// Layer adding [`Auth`].
#[derive(Clone)]
pub struct AuthLayer {
    directory: Arc<TenantDirectory>,
}

impl AuthLayer {
    /// Authenticates against `directory` (which reloads may swap underneath).
    pub fn new(directory: Arc<TenantDirectory>) -> Self {
        Self { directory }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;
    fn layer(&self, inner: S) -> Auth<S> {
        Auth {
            inner,
            directory: self.directory.clone(),
        }
    }
}

/// Inserts the caller's `Arc<Tenant>` into the request extensions, or answers 401 without
/// calling the inner service (so a bad key never reaches an engine, nor reads the body).
#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    directory: Arc<TenantDirectory>,
}

impl<S, B> Service<Request<B>> for Auth<S>
where
    S: Service<Request<B>, Error = GatewayError>,
{
    type Response = S::Response;
    type Error = GatewayError;
    type Future = Either<S::Future, Ready<Result<S::Response, GatewayError>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let tenant = match presented_key(&request) {
            Some(key) => self
                .directory
                .authenticate(key)
                .ok_or("Incorrect API key provided."),
            None => self
                .directory
                .anonymous()
                .ok_or("Missing API key: send `Authorization: Bearer <key>` or `x-api-key`."),
        };
        match tenant {
            Ok(tenant) => {
                request.extensions_mut().insert(tenant);
                Either::Left(self.inner.call(request))
            }
            Err(message) => Either::Right(ready(Err(GatewayError::Unauthorized(message)))),
        }
    }
}

/// The key from `Authorization: Bearer <key>` or `x-api-key: <key>`.
fn presented_key<B>(request: &Request<B>) -> Option<&str> {
    let headers = request.headers();
    if let Some(value) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let value = value.trim();
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))?;
        return Some(token.trim()).filter(|t| !t.is_empty());
    }
    headers
        .get(headers::API_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|t| !t.is_empty())
}
