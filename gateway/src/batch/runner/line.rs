//! One try of one line: its request down the batch stack (the `batch` class, the tenant's
//! own limits), and what the answer makes of it: a result to record, or a try to repeat.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokenscale_common::headers;
use tower::ServiceExt;

use super::Runner;
use crate::auth::{Authed, Tenant};
use crate::batch::files::error_line;
use crate::batch::types::LineResult;

/// Largest answer kept for one line.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// One line to run.
pub(super) struct Job {
    pub(super) batch: String,
    pub(super) tenant: String,
    pub(super) model: String,
    pub(super) path: &'static str,
    pub(super) index: u32,
    pub(super) custom_id: String,
    pub(super) body: Bytes,
}

/// What became of one try of a line.
pub(super) enum Sent {
    /// An answer to record (2xx or not).
    Answer(LineResult),
    /// No capacity, or no whole answer: try again later.
    Again(String),
}

impl Runner {
    /// Sends one line down the batch stack and reads the whole answer.
    pub(super) async fn send(&self, job: &Job) -> Sent {
        let Some(tenant) = self.tenants.by_name(&job.tenant) else {
            return Sent::Answer(error_result(
                job,
                "invalid_tenant",
                &format!("tenant `{}` is no longer configured", job.tenant),
            ));
        };
        let request = match line_request(job, tenant) {
            Ok(request) => request,
            Err(error) => return Sent::Answer(error_result(job, "invalid_request", &error)),
        };
        let response = match self.stack.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status();
        let request_id = response
            .headers()
            .get(headers::REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match read_answer(response.into_body()).await {
            Ok(body) => answered(job, status, request_id, &body),
            Err(error) => Sent::Again(format!("the answer broke off: {error}")),
        }
    }
}

/// What a whole answer makes of the line: capacity refusals are tried again, anything else
/// is the line's result, in OpenAI's output-line shape.
fn answered(job: &Job, status: StatusCode, request_id: Option<String>, body: &[u8]) -> Sent {
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    ) {
        return Sent::Again(format!("{status}: {}", String::from_utf8_lossy(body)));
    }
    let body: Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
    let usage = |pointer: &str| body.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    let line = json!({
        "id": line_id(job),
        "custom_id": job.custom_id,
        "response": {"status_code": status.as_u16(), "request_id": request_id, "body": body},
        "error": null,
    });
    Sent::Answer(LineResult {
        ok: status.is_success(),
        line: line.to_string(),
        prompt_tokens: usage("/usage/prompt_tokens"),
        cached_tokens: usage("/usage/prompt_tokens_details/cached_tokens"),
        completion_tokens: usage("/usage/completion_tokens"),
    })
}

/// A whole answer, up to [`MAX_ANSWER_BYTES`].
async fn read_answer(mut body: crate::Body) -> Result<Bytes, String> {
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > MAX_ANSWER_BYTES {
                return Err(format!(
                    "the answer is larger than {MAX_ANSWER_BYTES} bytes"
                ));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

/// A line's id in the output file: the batch and the line, so a line run twice keeps one.
fn line_id(job: &Job) -> String {
    format!(
        "batch_req_{}_{}",
        job.batch.trim_start_matches("batch-"),
        job.index
    )
}

/// The request a line becomes: its body as uploaded, the `batch` class, the tenant.
fn line_request(job: &Job, tenant: Arc<Tenant>) -> Result<Authed<Full<Bytes>>, String> {
    let request = Request::post(job.path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(headers::PRIORITY, "batch")
        .header(
            headers::REQUEST_ID,
            HeaderValue::from_str(&line_id(job)).map_err(|e| e.to_string())?,
        )
        .body(Full::new(job.body.clone()))
        .map_err(|e| e.to_string())?;
    Ok(Authed {
        tenant,
        batch_line: true,
        request,
    })
}

/// A line answered with an error of the gateway's own (no engine answer).
pub(super) fn error_result(job: &Job, code: &str, message: &str) -> LineResult {
    LineResult {
        ok: false,
        line: error_line(&line_id(job), &job.custom_id, code, message),
        prompt_tokens: 0,
        cached_tokens: 0,
        completion_tokens: 0,
    }
}
