//! The optional shared secret between the gateway and the engine (`--api-key`, as vLLM's): the
//! OpenAI routes need `Authorization: Bearer <key>`, compared in constant time, so the engine
//! cannot be called around the gateway; `/health`, `/metrics` and `/version` stay open for
//! probes and scrapers.

use axum::Router;
use axum::extract::Request;
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use sha2::{Digest, Sha256};

use super::ApiError;

/// `router` with the key check in front of its `/v1/` routes when `key` is set.
pub fn require(router: Router, key: Option<String>) -> Router {
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        return router;
    };
    // Hashes compared, not the keys: equal length, so the comparison time says nothing.
    let expected: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    router.layer(middleware::from_fn(move |request: Request, next: Next| {
        let allowed = !request.uri().path().starts_with("/v1/") || presents(&request, &expected);
        async move {
            if allowed {
                next.run(request).await
            } else {
                ApiError::unauthorized().into_response()
            }
        }
    }))
}

/// Whether `request` carries `Authorization: Bearer <key>` for the key hashing to `expected`.
fn presents(request: &Request, expected: &[u8; 32]) -> bool {
    let Some(token) = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
    else {
        return false;
    };
    let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    presented
        .iter()
        .zip(expected)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}
