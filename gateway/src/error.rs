//! Every way a request can fail, and the one place failures become OpenAI-style responses.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::Body;
use crate::vocab::{KeyRefused, RateLimitHeaders, Report};

pub use crate::vocab::BoxError;

/// Result type of the gateway's request path.
pub type Result<T, E = GatewayError> = std::result::Result<T, E>;

/// A failed request, with enough detail to answer the client.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The request body or its headers are invalid (400).
    #[error("{message}")]
    BadRequest {
        /// What is wrong, for the client.
        message: String,
        /// The offending field, if one.
        param: Option<&'static str>,
    },
    /// No key, or a key that matches no tenant (401). Its response carries the refusal for
    /// the audit log line, which the server writes with the client's address.
    #[error("{reason}")]
    Unauthorized {
        /// Why, for the client.
        reason: &'static str,
        /// What the audit line says of it.
        refused: Box<KeyRefused>,
    },
    /// The model is not served by this gateway (404).
    #[error("The model `{0}` does not exist or you do not have access to it.")]
    ModelNotFound(String),
    /// No route for this path (404).
    #[error("Unknown path `{0}`.")]
    PathNotFound(String),
    /// The body is larger than the configured limit (413).
    #[error("Request body is larger than {limit_bytes} bytes.")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit_bytes: usize,
    },
    /// The body is not `application/json` (415).
    #[error("Content-Type must be application/json, got `{0}`.")]
    UnsupportedMediaType(String),
    /// A tenant limit refused the request (429).
    #[error("{message}")]
    RateLimited {
        /// Which limit and by how much, for the client.
        message: String,
        /// The `x-ratelimit-*` headers to send.
        headers: Box<RateLimitHeaders>,
        /// When the request could pass.
        retry_after: Duration,
    },
    /// The admission queue is full, or the request's deadline passed while queued (503).
    #[error("{message}")]
    Overloaded {
        /// What happened, for the client.
        message: String,
        /// When a retry is worth trying.
        retry_after: Duration,
    },
    /// A replica failed before the response started (502, or 503 when it said so).
    #[error("upstream {replica}: {message}")]
    Upstream {
        /// Base URL of the replica that failed.
        replica: String,
        /// What failed.
        message: String,
        /// Whether another replica may succeed (nothing reached the client, the failure is
        /// the replica's, not the request's).
        retryable: bool,
        /// The status to answer with when no retry is left.
        status: StatusCode,
    },
    /// The replica did not answer in time (504).
    #[error("upstream {replica} did not answer within {timeout_ms} ms")]
    UpstreamTimeout {
        /// Base URL of the replica.
        replica: String,
        /// The timeout, in milliseconds.
        timeout_ms: u64,
    },
    /// No ready replica of the model is left to try (503): none is ready, or every ready one
    /// already failed this request.
    #[error("no ready replica of model `{model}` is left to try")]
    NoReplicaLeft {
        /// The served model name.
        model: String,
    },
    /// A layer did not find what an outer layer sets (500): the stack is built wrong.
    #[error("internal: {0} missing; the layer order is wrong")]
    LayerMissing(String),
    /// The gateway is shutting down (503).
    #[error("The gateway is shutting down.")]
    ShuttingDown,
}

impl GatewayError {
    /// Shorthand for a 400 with a message and an optional parameter name.
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        Self::BadRequest {
            message: message.into(),
            param,
        }
    }

    /// Whether another replica may succeed where this attempt failed: the replica's fault,
    /// and nothing of the attempt reached the client.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Upstream {
                retryable: true,
                ..
            } | Self::UpstreamTimeout { .. }
        )
    }

    /// The replica an upstream failure names.
    pub fn replica(&self) -> Option<&str> {
        match self {
            Self::Upstream { replica, .. } | Self::UpstreamTimeout { replica, .. } => Some(replica),
            _ => None,
        }
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::ModelNotFound(_) | Self::PathNotFound(_) => StatusCode::NOT_FOUND,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Overloaded { .. } | Self::ShuttingDown | Self::NoReplicaLeft { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::LayerMissing(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Upstream { status, .. } => *status,
            Self::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// OpenAI's `error.type` and `error.code` for this error.
    fn type_and_code(&self) -> (&'static str, Option<&'static str>) {
        match self {
            Self::BadRequest { .. } => ("invalid_request_error", None),
            Self::Unauthorized { .. } => ("invalid_request_error", Some("invalid_api_key")),
            Self::ModelNotFound(_) => ("invalid_request_error", Some("model_not_found")),
            Self::PathNotFound(_) => ("invalid_request_error", Some("unknown_url")),
            Self::PayloadTooLarge { .. } => ("invalid_request_error", Some("request_too_large")),
            Self::UnsupportedMediaType(_) => {
                ("invalid_request_error", Some("unsupported_media_type"))
            }
            Self::RateLimited { .. } => ("rate_limit_error", Some("rate_limit_exceeded")),
            Self::Overloaded { .. } | Self::ShuttingDown => ("server_error", Some("overloaded")),
            Self::Upstream { .. } | Self::NoReplicaLeft { .. } => {
                ("server_error", Some("upstream_error"))
            }
            Self::LayerMissing(_) => ("server_error", None),
            Self::UpstreamTimeout { .. } => ("server_error", Some("upstream_timeout")),
        }
    }

    /// How long the client should wait before retrying, for the statuses that say so.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::Overloaded { retry_after, .. } => {
                Some(*retry_after)
            }
            Self::Upstream { .. } | Self::NoReplicaLeft { .. } | Self::ShuttingDown => {
                Some(Duration::from_secs(1))
            }
            _ => None,
        }
    }

    /// The OpenAI-style response: `{"error": {"message", "type", "param", "code"}}`.
    pub fn into_response(self) -> Response<Body> {
        let (kind, code) = self.type_and_code();
        let param = match &self {
            Self::BadRequest { param, .. } => *param,
            _ => None,
        };
        let body = Bytes::from(error_json(&self.to_string(), kind, param, code));
        let report = match &self {
            Self::Unauthorized { refused, .. } => Report {
                refused: Some(Arc::from(refused.clone())),
                ..Report::default()
            },
            _ => Report::default(),
        };
        let mut response = Response::new(Body::full(body, report));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(after) = self.retry_after() {
            // Whole seconds, rounded up, as RFC 9110 wants; `retry-after-ms` for the SDKs
            // that read it (the OpenAI clients do).
            let secs = after.as_millis().div_ceil(1000).max(1);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs as u64));
            headers.insert(
                "retry-after-ms",
                HeaderValue::from(after.as_millis() as u64),
            );
        }
        if let Self::RateLimited {
            headers: limits, ..
        } = &self
        {
            limits.write(headers);
        }
        response
    }
}

/// The JSON text of an OpenAI error object.
pub fn error_json(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> String {
    serde_json::json!({
        "error": {"message": message, "type": kind, "param": param, "code": code}
    })
    .to_string()
}

/// A complete body from bytes.
pub fn full_body(bytes: Bytes) -> Body {
    Body::full(bytes, Report::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_replica_left_is_a_503_naming_no_replica_and_a_missing_layer_a_500() {
        let none = GatewayError::NoReplicaLeft { model: "m".into() };
        assert_eq!(none.replica(), None);
        assert!(!none.is_retryable());
        let response = none.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let failed = GatewayError::Upstream {
            replica: "http://10.0.0.1:8000".into(),
            message: "reset".into(),
            retryable: true,
            status: StatusCode::BAD_GATEWAY,
        };
        assert_eq!(failed.replica(), Some("http://10.0.0.1:8000"));
        let bug = GatewayError::LayerMissing("info".into());
        assert_eq!(bug.replica(), None);
        assert_eq!(
            bug.into_response().status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
