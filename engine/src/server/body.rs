//! Reading a JSON request body: bounded size (413 past the limit), then typed parsing where
//! every failure (malformed JSON, wrong types, invalid UTF-8) is a 400 naming what was wrong.

use axum::body::Body;
use axum::http::header::CONTENT_LENGTH;
use axum::http::{HeaderMap, Request};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;
use tokenscale_common::openai::{error_reason, member_at_fault};

use super::ApiError;
use super::deadline::BodyTimedOut;

/// Reads at most `limit_bytes` of `request`'s body and parses it as `T`.
pub async fn read_json<T: DeserializeOwned>(
    request: Request<Body>,
    limit_bytes: usize,
) -> Result<(HeaderMap, T), ApiError> {
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit_bytes as u64) {
        return Err(ApiError::too_large(limit_bytes));
    }
    let bytes = match Limited::new(body, limit_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.is::<LengthLimitError>() => return Err(ApiError::too_large(limit_bytes)),
        Err(err) if timed_out(err.as_ref()) => {
            return Err(ApiError::timed_out(format!(
                "{err}; send it at once after the headers"
            )));
        }
        Err(err) => {
            return Err(ApiError::bad_request(format!(
                "could not read the request body: {err}"
            )));
        }
    };
    Ok((parts.headers, parse_json(&bytes)?))
}

/// Whether reading the body failed on its deadline (see `deadline.rs`).
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<BodyTimedOut>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Parses a request body; the message says what is wrong and where.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the request body is empty; expected a JSON object",
        ));
    }
    if let Err(err) = std::str::from_utf8(bytes) {
        return Err(ApiError::bad_request(format!(
            "the request body is not valid UTF-8 (at byte {})",
            err.valid_up_to()
        )));
    }
    serde_json::from_slice(bytes).map_err(|err| {
        if !err.is_data() {
            return ApiError::bad_request(format!("malformed JSON: {err}"));
        }
        let parse = |b: &[u8]| serde_json::from_slice::<T>(b).err();
        match member_at_fault(bytes, &err, parse) {
            Some(member) => ApiError::invalid_param(
                &member,
                format!("invalid request: {member}: {}", error_reason(&err)),
            ),
            None => ApiError::bad_request(format!("invalid request: {err}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscale_common::openai::CompletionRequest;

    fn error_of(bytes: &[u8]) -> String {
        match parse_json::<CompletionRequest>(bytes) {
            Ok(_) => String::new(),
            Err(err) => err.message,
        }
    }

    #[test]
    fn each_kind_of_bad_body_is_named() {
        assert!(error_of(b"").contains("empty"));
        assert!(error_of(b"{\"prompt\": ").contains("malformed JSON"));
        assert!(error_of(b"{\"prompt\": \"a\xff\"}").contains("UTF-8"));
        assert!(
            error_of(b"{\"prompt\": \"a\", \"max_tokens\": \"ten\"}").contains("invalid request")
        );
        assert!(error_of(b"{\"max_tokens\": 3}").contains("prompt"));
        assert_eq!(error_of(b"{\"prompt\": \"a\"}"), "");
    }

    #[test]
    fn a_type_error_names_the_member() {
        let body = br#"{"prompt": "a", "speculative": "yes"}"#;
        let err = parse_json::<CompletionRequest>(body).expect_err("a 400");
        assert_eq!(
            err.message,
            "invalid request: speculative: invalid type: string \"yes\", expected a boolean"
        );
        assert_eq!(err.param.as_deref(), Some("speculative"));
        assert!(error_of(br#"{"prompt": "a", "max_tokens": "ten"}"#).contains(": max_tokens: "));
        let nested = br#"{"prompt": "a", "stream_options": {"include_usage": 1}}"#;
        assert!(error_of(nested).contains(": stream_options.include_usage: invalid type"));
    }
}
