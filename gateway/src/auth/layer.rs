//! `Auth<S>`: finds the tenant from `Authorization: Bearer` or `x-api-key`, or refuses (401)
//! with an audit log line that names the client and a fingerprint of the key, never the key.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use http::Request;
use tower::{Layer, Service};

use super::{Presented, Tenant, TenantDirectory, presented_key};
use crate::error::GatewayError;
use crate::vocab::KeyRefused;

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

/// The tenant of `request`, or the 401 to answer (its response carries a [`KeyRefused`]).
pub fn authenticate<B>(
    request: &Request<B>,
    directory: &TenantDirectory,
) -> Result<Arc<Tenant>, GatewayError> {
    let refused = |reason: &'static str, key: Option<&str>| GatewayError::Unauthorized {
        reason,
        refused: Box::new(KeyRefused::of(request, reason, key)),
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

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::config::Config;

    #[test]
    fn a_refused_key_comes_back_on_its_401_with_what_the_audit_line_says_never_the_key() {
        let yaml = format!(
            "tenants:\n  - name: a\n    keys: [\"{}\"]\n",
            super::super::hash_key("good-key")
        );
        let config = Config::from_yaml(&yaml).expect("valid config");
        let directory = TenantDirectory::new(&config.tenants, None);
        let request = Request::builder()
            .uri("/v1/chat/completions")
            .header("authorization", "Bearer stolen-key")
            .header(tokenscale_common::headers::REQUEST_ID, "req-7")
            .body(())
            .expect("request");
        let error = authenticate(&request, &directory).expect_err("unknown key");
        let response = error.into_response();
        assert_eq!(response.status(), http::StatusCode::UNAUTHORIZED);
        let report = response.body().report();
        let refused = report
            .refused
            .as_deref()
            .expect("the refusal rides on the 401");
        let fingerprint = hex::encode(&Sha256::digest(b"stolen-key")[..6]);
        assert_eq!(
            refused,
            &KeyRefused {
                reason: "Incorrect API key provided.",
                key_sha256_prefix: Some(fingerprint),
                request_id: Some("req-7".into()),
                path: "/v1/chat/completions".into(),
            }
        );
        assert!(!format!("{refused:?}").contains("stolen-key"));

        let good = Request::builder()
            .header("x-api-key", "good-key")
            .body(())
            .expect("request");
        assert!(authenticate(&good, &directory).is_ok());
    }
}
