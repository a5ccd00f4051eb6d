//! `KeyRefused`: a refused credential, as the audit line tells it.

use std::net::SocketAddr;

use http::Request;
use sha2::{Digest, Sha256};

/// A refused credential, as the `tokenscale::audit` line tells it: why, the request's id and
/// path, and the first 12 hex digits of the key's SHA-256, which correlate attempts with one
/// key without revealing it (the config holds the full hashes of the real keys anyway).
///
/// It travels up in the 401's [`Report`](super::Report), and the server writes the line with
/// the client's address ([`KeyRefused::log`]): the address is the connection's, and putting
/// it on every request for the few refused ones cost two allocations per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRefused {
    /// Why, as the client was told.
    pub reason: &'static str,
    /// The first 12 hex digits of the presented key's SHA-256; `None` when none was presented.
    pub key_sha256_prefix: Option<String>,
    /// The request's `x-request-id`, when it had one.
    pub request_id: Option<String>,
    /// The request's path.
    pub path: String,
}

impl KeyRefused {
    /// The refusal of `request` for `reason`, fingerprinting `key` (never keeping it).
    pub fn of<B>(request: &Request<B>, reason: &'static str, key: Option<&str>) -> Self {
        let request_id = request
            .headers()
            .get(tokenscale_common::headers::REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Self {
            reason,
            key_sha256_prefix: key.map(|key| hex::encode(&Sha256::digest(key.as_bytes())[..6])),
            request_id,
            path: request.uri().path().to_string(),
        }
    }

    /// Writes the audit line, naming the client at `client`.
    pub fn log(&self, client: SocketAddr) {
        tracing::warn!(
            target: "tokenscale::audit",
            event = "key_refused",
            reason = self.reason,
            key_sha256_prefix = self.key_sha256_prefix.as_deref(),
            %client,
            request_id = self.request_id.as_deref(),
            path = %self.path,
            "refused a request's credentials"
        );
    }
}
