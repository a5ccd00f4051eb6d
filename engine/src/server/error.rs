//! Every failure a request can meet becomes a response here, in one place: an HTTP status and
//! the OpenAI error body `{"error": {"message", "type", "param", "code"}}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokenscale_common::openai::{ErrorBody, ErrorResponse};

/// A request the server will not (or cannot) serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// `invalid_request_error`, `not_found_error`, `server_error`, `service_unavailable`.
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// 400: the request is malformed or asks for something out of range.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 408: the request (its body) did not arrive in time.
    pub fn timed_out(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            message,
        )
    }

    /// 400 naming the field at fault.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.to_string()),
            ..Self::bad_request(message)
        }
    }

    /// 400: prompt plus completion do not fit the context.
    pub fn context_length(message: impl Into<String>) -> Self {
        Self {
            code: Some("context_length_exceeded"),
            ..Self::invalid_param("messages", message)
        }
    }

    /// 401: the engine requires its API key and the request did not carry it.
    pub fn unauthorized() -> Self {
        Self {
            code: Some("invalid_api_key"),
            ..Self::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "this engine requires its API key: `Authorization: Bearer <key>`",
            )
        }
    }

    /// 404: the request names a model this engine does not serve.
    pub fn model_not_found(asked: &str, served: &str) -> Self {
        let message = format!("the model `{asked}` does not exist; this engine serves `{served}`");
        Self {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..Self::new(StatusCode::NOT_FOUND, "not_found_error", message)
        }
    }

    /// 404: no such route.
    pub fn route_not_found(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            format!("no route for {path}"),
        )
    }

    /// 405: the route exists, the method does not.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed on this route",
        )
    }

    /// 413: the body is larger than the server accepts.
    pub fn too_large(limit_bytes: usize) -> Self {
        let message = format!("the request body is larger than the limit of {limit_bytes} bytes");
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            message,
        )
    }

    /// 503: loading, draining, or the engine is gone.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            message,
        )
    }

    /// 500: the engine failed while serving the request.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The body as sent to the client.
    pub fn body(&self) -> ErrorResponse {
        ErrorResponse {
            error: ErrorBody {
                message: self.message.clone(),
                kind: self.kind.to_string(),
                param: self.param.clone(),
                code: self.code.map(str::to_string),
            },
        }
    }
}

impl From<crate::sampling::SamplingError> for ApiError {
    fn from(err: crate::sampling::SamplingError) -> Self {
        match err.param() {
            Some(param) => Self::invalid_param(param, err.to_string()),
            None => Self::internal(err.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, "{}", self.message);
        }
        (self.status, Json(self.body())).into_response()
    }
}
