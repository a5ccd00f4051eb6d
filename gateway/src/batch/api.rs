//! The Batch API's HTTP side, as OpenAI's clients call it: `/v1/files` (upload, list, read,
//! content, delete) and `/v1/batches` (create, list, read, cancel). Every object belongs to
//! the tenant whose key made it; another tenant gets 404, as if it did not exist.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Batches;
use super::types::{
    BatchRecord, BatchStatus, FileMeta, NewBatch, Purpose, new_id, now_s, parse_window,
};
use super::validate::Endpoint;
use crate::Body;
use crate::auth::{Tenant, TenantDirectory, authenticate};
use crate::error::{error_json, full_body};

/// Largest `POST /v1/batches` body.
const MAX_CREATE_BYTES: usize = 64 << 10;

/// OpenAI's cap on a batch's metadata pairs.
const MAX_METADATA: usize = 16;

/// An error answer: status, message, and OpenAI's `param` and `code`.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    message: String,
    param: Option<&'static str>,
    code: Option<&'static str>,
    /// Seconds, for `retry-after`.
    retry_after: Option<u64>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 503 with `retry-after: 1`: the pod is busy.
    pub(super) fn overloaded(message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
        }
    }

    pub(super) fn bad(message: impl Into<String>, param: &'static str) -> Self {
        Self {
            param: Some(param),
            ..Self::new(StatusCode::BAD_REQUEST, message)
        }
    }

    fn not_found(what: &str, id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("No such {what} object: {id}"),
        )
    }

    pub(super) fn store(error: impl std::fmt::Display) -> Self {
        tracing::warn!(%error, "batch api: the batch store failed");
        Self {
            code: Some("store_unavailable"),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("The batch store is unavailable; retry later. ({error})"),
            )
        }
    }

    fn into_response(self) -> Response<Body> {
        let kind = match self.status.as_u16() {
            429 => "rate_limit_error",
            500.. => "server_error",
            _ => "invalid_request_error",
        };
        let body = error_json(&self.message, kind, self.param, self.code);
        let mut response = json_response(StatusCode::OK, body.into());
        *response.status_mut() = self.status;
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

pub(super) type Answer = Result<Response<Body>, ApiError>;

/// Whether `path` is the Batch API's.
pub fn is_batch_path(path: &str) -> bool {
    path == "/v1/files"
        || path.starts_with("/v1/files/")
        || path == "/v1/batches"
        || path.starts_with("/v1/batches/")
}

impl Batches {
    /// Answers a Batch API request (`is_batch_path`).
    pub async fn handle<B>(&self, request: Request<B>, tenants: &TenantDirectory) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<crate::error::BoxError>,
    {
        let tenant = match authenticate(&request, tenants) {
            Ok(tenant) => tenant,
            Err(error) => return error.into_response(),
        };
        match self.route(request, tenant).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        }
    }

    async fn route<B>(&self, request: Request<B>, tenant: Arc<Tenant>) -> Answer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<crate::error::BoxError>,
    {
        let path = request.uri().path().trim_end_matches('/').to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        let parts: Vec<&str> = path.trim_start_matches("/v1/").split('/').collect();
        let method = request.method().clone();
        match (&method, parts.as_slice()) {
            (&Method::POST, ["files"]) => self.upload(request, &tenant).await,
            (&Method::GET, ["files"]) => self.list_files(&tenant, &query).await,
            (&Method::GET, ["files", id]) => {
                Ok(json_value(&self.own_file(&tenant, id).await?.to_openai()))
            }
            (&Method::GET, ["files", id, "content"]) => self.content(&tenant, id).await,
            (&Method::DELETE, ["files", id]) => self.delete_file(&tenant, id).await,
            (&Method::POST, ["batches"]) => self.create(request, &tenant).await,
            (&Method::GET, ["batches"]) => self.list_batches(&tenant, &query).await,
            (&Method::GET, ["batches", id]) => {
                let batch = self.own_batch(&tenant, id).await?;
                self.batch_answer(&batch).await
            }
            (&Method::POST, ["batches", id, "cancel"]) => self.cancel(&tenant, id).await,
            _ => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("Unknown path `{method} {path}`."),
            )),
        }
    }

    /// `GET /v1/files`: the tenant's files (`purpose`, `limit`, `after`, `order` as OpenAI).
    async fn list_files(&self, tenant: &Tenant, query: &str) -> Answer {
        let query = Query::parse(query)?;
        let mut files = self
            .state
            .files(&tenant.name)
            .await
            .map_err(ApiError::store)?;
        if let Some(purpose) = &query.purpose {
            files.retain(|f| {
                serde_json::to_value(f.purpose)
                    .ok()
                    .as_ref()
                    .and_then(Value::as_str)
                    == Some(purpose)
            });
        }
        if query.ascending {
            files.reverse();
        }
        let data: Vec<Value> = files.iter().map(FileMeta::to_openai).collect();
        let ids: Vec<&str> = files.iter().map(|f| f.id.as_str()).collect();
        Ok(json_value(&page(&ids, data, &query)))
    }

    async fn own_file(&self, tenant: &Tenant, id: &str) -> Result<FileMeta, ApiError> {
        match self.state.file(id).await.map_err(ApiError::store)? {
            Some(meta) if meta.tenant == *tenant.name => Ok(meta),
            _ => Err(ApiError::not_found("File", id)),
        }
    }

    /// `GET /v1/files/{id}/content`: the bytes, streamed from the store.
    async fn content(&self, tenant: &Tenant, id: &str) -> Answer {
        let meta = self.own_file(tenant, id).await?;
        let stream = self
            .objects
            .get_stream(&meta.object_key())
            .await
            .map_err(|e| match e {
                super::objects::ObjectError::NotFound => ApiError::not_found("File", id),
                other => ApiError::store(other),
            })?;
        let frames = stream.map_ok(http_body::Frame::data);
        let mut response = Response::new(Body::new(http_body_util::StreamBody::new(frames)));
        if let Ok(length) = HeaderValue::try_from(meta.bytes.to_string()) {
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, length);
        }
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        Ok(response)
    }

    /// `DELETE /v1/files/{id}`.
    async fn delete_file(&self, tenant: &Tenant, id: &str) -> Answer {
        let meta = self.own_file(tenant, id).await?;
        // The record goes first: a file listed without its bytes would answer 404 on read.
        self.state
            .delete_file(&meta.id)
            .await
            .map_err(ApiError::store)?;
        self.objects
            .delete(&meta.object_key())
            .await
            .map_err(ApiError::store)?;
        Ok(json_value(
            &json!({"id": meta.id, "object": "file", "deleted": true}),
        ))
    }

    /// `POST /v1/batches`: a new batch of an uploaded file, `validating` until the runner
    /// has checked every line.
    async fn create<B>(&self, request: Request<B>, tenant: &Tenant) -> Answer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<crate::error::BoxError>,
    {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Create {
            input_file_id: String,
            endpoint: String,
            completion_window: String,
            #[serde(default)]
            metadata: Option<BTreeMap<String, String>>,
        }
        let body = read_body(request, MAX_CREATE_BYTES).await?;
        let create: Create = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad(format!("Invalid batch request: {e}"), "body"))?;
        let endpoint = Endpoint::parse(&create.endpoint).ok_or_else(|| {
            ApiError::bad(
                format!(
                    "endpoint `{}` is not served: use /v1/chat/completions or /v1/completions",
                    create.endpoint
                ),
                "endpoint",
            )
        })?;
        let window_s = parse_window(&create.completion_window).ok_or_else(|| {
            ApiError::bad(
                format!(
                    "completion_window `{}` is not a duration from 1s to 7d such as `24h`",
                    create.completion_window
                ),
                "completion_window",
            )
        })?;
        if create.metadata.as_ref().is_some_and(|m| {
            m.len() > MAX_METADATA || m.iter().any(|(k, v)| k.len() > 64 || v.len() > 512)
        }) {
            return Err(ApiError::bad(
                "metadata takes at most 16 pairs, keys up to 64 characters, values up to 512",
                "metadata",
            ));
        }
        let file = self
            .own_file(tenant, &create.input_file_id)
            .await
            .map_err(|mut e| {
                e.param = Some("input_file_id");
                e
            })?;
        if file.purpose != Purpose::Batch {
            return Err(ApiError::bad(
                format!("file `{}` was not uploaded with purpose `batch`", file.id),
                "input_file_id",
            ));
        }
        if let Some(most) = tenant.batch.max_batches_in_flight {
            let running = self
                .state
                .batches(&tenant.name)
                .await
                .map_err(ApiError::store)?
                .iter()
                .filter(|b| !b.status.is_terminal())
                .count();
            if running >= most as usize {
                return Err(ApiError {
                    code: Some("batch_limit_exceeded"),
                    ..ApiError::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        format!(
                            "Tenant `{}` has {running} unfinished batches, its most \
                             (max_batches_in_flight {most}); wait for one to finish.",
                            tenant.name
                        ),
                    )
                });
            }
        }
        let new = NewBatch {
            tenant: tenant.name.to_string(),
            endpoint,
            input_file_id: file.id,
            completion_window: create.completion_window,
            window_s,
            metadata: create.metadata,
        };
        let batch = BatchRecord::new(new_id("batch"), new, now_s());
        self.state
            .put_batch(&batch)
            .await
            .map_err(ApiError::store)?;
        self.wake.notify_one();
        tracing::info!(batch = %batch.id, tenant = %batch.tenant, "batch created");
        Ok(json_value(&batch.to_openai(None)))
    }

    async fn own_batch(&self, tenant: &Tenant, id: &str) -> Result<BatchRecord, ApiError> {
        match self.state.batch(id).await.map_err(ApiError::store)? {
            Some(batch) if batch.tenant == *tenant.name => Ok(batch),
            _ => Err(ApiError::not_found("Batch", id)),
        }
    }

    /// The batch object, with live counts while it runs.
    async fn batch_answer(&self, batch: &BatchRecord) -> Answer {
        Ok(json_value(&batch.to_openai(self.live(batch).await?)))
    }

    async fn live(&self, batch: &BatchRecord) -> Result<Option<super::types::Progress>, ApiError> {
        if batch.status.is_terminal() {
            return Ok(None);
        }
        Ok(Some(
            self.state
                .progress(&batch.id)
                .await
                .map_err(ApiError::store)?,
        ))
    }

    /// `GET /v1/batches`: newest first, `limit` and `after` as OpenAI.
    async fn list_batches(&self, tenant: &Tenant, query: &str) -> Answer {
        let query = Query::parse(query)?;
        let batches = self
            .state
            .batches(&tenant.name)
            .await
            .map_err(ApiError::store)?;
        let ids: Vec<&str> = batches.iter().map(|b| b.id.as_str()).collect();
        let mut data = Vec::with_capacity(batches.len());
        for batch in &batches {
            data.push(batch.to_openai(self.live(batch).await?));
        }
        Ok(json_value(&page(&ids, data, &query)))
    }

    /// `POST /v1/batches/{id}/cancel`: `cancelling` (no new line starts; running lines
    /// finish), then `cancelled` with what finished in the output file.
    async fn cancel(&self, tenant: &Tenant, id: &str) -> Answer {
        for _ in 0..16 {
            let batch = self.own_batch(tenant, id).await?;
            if !matches!(
                batch.status,
                BatchStatus::Validating | BatchStatus::InProgress
            ) {
                if batch.status == BatchStatus::Cancelling {
                    return self.batch_answer(&batch).await;
                }
                return Err(ApiError {
                    code: Some("invalid_batch_status"),
                    ..ApiError::new(
                        StatusCode::CONFLICT,
                        format!(
                            "Cannot cancel a batch with status {}.",
                            batch.status.as_str()
                        ),
                    )
                });
            }
            let mut next = batch;
            next.version += 1;
            next.status = BatchStatus::Cancelling;
            next.cancelling_at = Some(now_s());
            if self
                .state
                .replace_batch(&next)
                .await
                .map_err(ApiError::store)?
            {
                self.wake.notify_one();
                return self.batch_answer(&next).await;
            }
        }
        Err(ApiError::new(
            StatusCode::CONFLICT,
            "The batch kept changing while it was being cancelled; retry.",
        ))
    }
}

/// Reads a request body up to `limit` bytes (413 past it).
async fn read_body<B>(request: Request<B>, limit: usize) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<crate::error::BoxError>,
{
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("The request body is larger than {limit} bytes."),
        )),
        Err(error) => Err(ApiError::bad(
            format!("The request body broke off: {error}"),
            "body",
        )),
    }
}

/// List parameters (`limit` 1–100, default 20; `after` an id; `order` asc|desc; `purpose`).
struct Query {
    limit: usize,
    after: Option<String>,
    ascending: bool,
    purpose: Option<String>,
}

impl Query {
    fn parse(query: &str) -> Result<Self, ApiError> {
        let mut parsed = Self {
            limit: 20,
            after: None,
            ascending: false,
            purpose: None,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "limit" => {
                    parsed.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=10_000).contains(n))
                        .ok_or_else(|| {
                            ApiError::bad("limit must be a whole number from 1 to 10000", "limit")
                        })?;
                }
                "after" => parsed.after = Some(value.to_string()),
                "order" => parsed.ascending = value == "asc",
                "purpose" => parsed.purpose = Some(value.to_string()),
                _ => {}
            }
        }
        Ok(parsed)
    }
}

/// One page of a list: the items after `query.after`, at most `query.limit`.
fn page(ids: &[&str], data: Vec<Value>, query: &Query) -> Value {
    let start = query
        .after
        .as_deref()
        .and_then(|after| ids.iter().position(|id| *id == after))
        .map_or(0, |i| i + 1);
    let end = (start + query.limit).min(ids.len());
    let items: Vec<Value> = data
        .into_iter()
        .skip(start)
        .take(end.saturating_sub(start))
        .collect();
    json!({
        "object": "list",
        "data": items,
        "first_id": ids.get(start),
        "last_id": if end > start { ids.get(end - 1) } else { None },
        "has_more": end < ids.len(),
    })
}

pub(super) fn json_value(value: &Value) -> Response<Body> {
    json_response(StatusCode::OK, value.to_string().into())
}

fn json_response(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut response = Response::new(full_body(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_after_and_limit() {
        let ids = ["c", "b", "a"];
        let data: Vec<Value> = ids.iter().map(|id| json!(id)).collect();
        let query = Query::parse("limit=2").expect("ok");
        let first = page(&ids, data.clone(), &query);
        assert_eq!(first["data"], json!(["c", "b"]));
        assert_eq!(first["has_more"], json!(true));
        assert_eq!(first["last_id"], json!("b"));
        let query = Query::parse("limit=2&after=b").expect("ok");
        let second = page(&ids, data, &query);
        assert_eq!(second["data"], json!(["a"]));
        assert_eq!(second["has_more"], json!(false));
        assert!(Query::parse("limit=0").is_err());
        assert!(Query::parse("limit=x").is_err());
    }

    #[test]
    fn batch_paths_are_recognised() {
        assert!(is_batch_path("/v1/files"));
        assert!(is_batch_path("/v1/files/file-1/content"));
        assert!(is_batch_path("/v1/batches/b/cancel"));
        assert!(!is_batch_path("/v1/filesx"));
        assert!(!is_batch_path("/v1/chat/completions"));
    }
}
