//! `Auth<S>`: finds the tenant from `Authorization: Bearer` or `x-api-key`, or refuses (401)
//! with an audit log line that names the client and a fingerprint of the key, never the key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use http::Request;
use sha2::{Digest, Sha256};
use tower::{Layer, Service};

use super::{Presented, Tenant, TenantDirectory, presented_key};
use crate::error::GatewayError;

/// A request whose tenant is known: what the layers between authentication and the parse
/// layer take (the in-flight caps, the early limits), and what the batch runner sends.
#[derive(Debug)]
pub struct Authed<B> {
    /// Whose request it is.
    pub tenant: Arc<Tenant>,
    /// A Batch API line (sent by the batch runner as the batch's tenant), not a client's.
    pub batch_line: bool,
    /// The request, its body unread.
    pub request: Request<B>,
}

/// The client's address, put in the request's extensions by the server (the connection's,
/// as hyper's own connection facts are; read only for the audit log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

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

/// Calls the inner service with the request [`Authed`] as the caller's tenant, or answers
/// 401 without calling it (so a bad key never reaches an engine, nor reads the body).
#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    directory: Arc<TenantDirectory>,
}

impl<S, B> Service<Request<B>> for Auth<S>
where
    S: Service<Authed<B>, Error = GatewayError>,
{
    type Response = S::Response;
    type Error = GatewayError;
    type Future = Either<S::Future, Ready<Result<S::Response, GatewayError>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match authenticate(&request, &self.directory) {
            Ok(tenant) => Either::Left(self.inner.call(Authed {
                tenant,
                batch_line: false,
                request,
            })),
            Err(error) => Either::Right(ready(Err(error))),
        }
    }
}

/// The tenant of `request`, or the 401 to answer (logged on the audit target).
pub fn authenticate<B>(
    request: &Request<B>,
    directory: &TenantDirectory,
) -> Result<Arc<Tenant>, GatewayError> {
    let refused = |reason: &'static str, key: Option<&str>| {
        audit_refusal(request, reason, key);
        GatewayError::Unauthorized(reason)
    };
    match presented_key(request.headers()) {
        Err(malformed) => Err(refused(malformed, None)),
        Ok(Presented::Key(key)) => directory
            .authenticate(key)
            .or_else(|| directory.unknown_key())
            .ok_or_else(|| refused("Incorrect API key provided.", Some(key))),
        Ok(Presented::Nothing) => directory.anonymous().ok_or_else(|| {
            refused(
                "Missing API key: send `Authorization: Bearer <key>` or `x-api-key`.",
                None,
            )
        }),
    }
}

/// One `tokenscale::audit` line per refused credential: who (address, request id), why, and
/// the first 12 hex digits of the key's SHA-256, which correlate attempts with one key
/// without revealing it (the config holds the full hashes of the real keys anyway).
fn audit_refusal<B>(request: &Request<B>, reason: &'static str, key: Option<&str>) {
    let fingerprint = key.map(|key| hex::encode(&Sha256::digest(key.as_bytes())[..6]));
    let client = request.extensions().get::<ClientAddr>().map(|c| c.0);
    let request_id = request
        .headers()
        .get(tokenscale_common::headers::REQUEST_ID)
        .and_then(|v| v.to_str().ok());
    tracing::warn!(
        target: "tokenscale::audit",
        event = "key_refused",
        reason,
        key_sha256_prefix = fingerprint.as_deref(),
        client = ?client,
        request_id,
        path = request.uri().path(),
        "refused a request's credentials"
    );
}
