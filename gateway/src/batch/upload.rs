//! `POST /v1/files`, streamed under the bounds every request has: an in-flight slot (the
//! pod's and the tenant's caps), the pod's body budget for the bytes held in memory, a
//! minimum rate and a total deadline. The body is parsed frame by frame (`FormStream`) and
//! the file written to the store in parts (`ObjectUpload`); the file record is written only
//! once the object is complete, so a cut upload leaves neither.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::Batches;
use super::api::{Answer, ApiError, json_value};
use super::multipart::{Event, FormStream};
use super::object_upload::ObjectUpload;
use super::types::{FileMeta, Purpose, new_id, now_s};
use crate::admission::{InFlightCounts, in_flight_refused};
use crate::auth::Tenant;
use crate::request::body_budget_spent;

/// Multipart framing allowed on top of the largest file.
const MULTIPART_OVERHEAD: u64 = 64 << 10;

/// Budget held beyond one part: the frame being handled and the parser's buffer.
const FRAME_SLACK: usize = 1 << 20;

/// How long an upload waits for the body budget before 503.
const BUDGET_WAIT: Duration = Duration::from_secs(2);

/// The window the minimum rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// The pod's bounds an upload shares with every request (one object of each).
#[derive(Clone)]
pub struct UploadBounds {
    /// The pod's body budget (`bounds.max_buffered_body_bytes`).
    pub body_budget: Arc<Semaphore>,
    /// The pod's and tenants' in-flight caps.
    pub in_flight: Arc<InFlightCounts>,
}

/// The minimum-rate check: at the end of each window, the bytes it brought.
#[derive(Debug)]
pub struct Pace {
    min_per_s: u64,
    window_start: Instant,
    bytes_at_start: u64,
}

impl Pace {
    /// Measures from `now`; `min_per_s` 0 never refuses.
    pub fn new(min_per_s: u64, now: Instant) -> Self {
        Self {
            min_per_s,
            window_start: now,
            bytes_at_start: 0,
        }
    }

    /// When the current window closes.
    pub fn window_end(&self) -> Instant {
        self.window_start + RATE_WINDOW
    }

    /// At `now`, with `total` bytes received: the rate of a closed window below the floor.
    pub fn check(&mut self, now: Instant, total: u64) -> Result<(), u64> {
        if now < self.window_end() {
            return Ok(());
        }
        let elapsed = now.duration_since(self.window_start).as_secs_f64();
        let rate = ((total - self.bytes_at_start) as f64 / elapsed) as u64;
        if rate < self.min_per_s {
            return Err(rate);
        }
        (self.window_start, self.bytes_at_start) = (now, total);
        Ok(())
    }
}

/// One upload's progress.
struct Receiving {
    meta: FileMeta,
    purpose: Option<String>,
    upload: Option<ObjectUpload>,
    saw_file: bool,
    held: OwnedSemaphorePermit,
}

impl Batches {
    /// `POST /v1/files`: a multipart upload with `purpose=batch` and a `file`.
    pub(super) async fn upload<B>(&self, request: Request<B>, tenant: &Tenant) -> Answer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<crate::error::BoxError>,
    {
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let parser =
            FormStream::new(content_type).map_err(|e| ApiError::bad(e.to_string(), "file"))?;
        let limit = self.config.max_file_bytes as u64;
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit + MULTIPART_OVERHEAD) {
            return Err(too_large(limit));
        }
        let _slot = match self.bounds.in_flight.enter(tenant) {
            Ok(slot) => slot,
            Err(refusal) => return Ok(in_flight_refused(refusal).into_response()),
        };
        let part = self.objects.part_bytes() + FRAME_SLACK;
        let Some(held) = take_budget(&self.bounds.body_budget, part).await else {
            return Ok(body_budget_spent().into_response());
        };
        let mut receiving = Receiving {
            meta: FileMeta {
                id: new_id("file"),
                tenant: tenant.name.to_string(),
                bytes: 0,
                created_at: now_s(),
                filename: "upload.jsonl".into(),
                purpose: Purpose::Batch,
            },
            purpose: None,
            upload: None,
            saw_file: false,
            held,
        };
        let result = self
            .receive(request.into_body(), parser, &mut receiving)
            .await;
        match result {
            Ok(()) => self.record(receiving).await,
            Err(error) => {
                if let Some(upload) = receiving.upload.take() {
                    upload.abort().await;
                }
                Err(error)
            }
        }
    }

    /// Reads the body into the store within the rate floor and the deadline.
    async fn receive<B>(
        &self,
        body: B,
        mut parser: FormStream,
        receiving: &mut Receiving,
    ) -> Result<(), ApiError>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<crate::error::BoxError>,
    {
        let mut body = std::pin::pin!(body);
        let timeout = Duration::from_millis(self.config.upload_timeout_ms);
        let deadline = Instant::now() + timeout;
        let mut pace = Pace::new(self.config.upload_min_bytes_per_s, Instant::now());
        let (mut total, mut events) = (0u64, Vec::new());
        loop {
            let wake = pace.window_end().min(deadline);
            let frame = match tokio::time::timeout_at(wake, body.frame()).await {
                Ok(Some(Ok(frame))) => frame.into_data().ok(),
                Ok(None) => break,
                Ok(Some(Err(error))) => {
                    let error: crate::error::BoxError = error.into();
                    return Err(ApiError::bad(
                        format!("Could not read the upload: {error}"),
                        "file",
                    ));
                }
                Err(_) => None,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "The upload did not finish within batch.upload_timeout_ms ({} s).",
                        timeout.as_secs()
                    ),
                ));
            }
            if let Some(data) = frame {
                total += data.len() as u64;
                if total > self.config.max_file_bytes as u64 + MULTIPART_OVERHEAD {
                    return Err(too_large(self.config.max_file_bytes as u64));
                }
                parser
                    .feed(&data, &mut events)
                    .map_err(|e| ApiError::bad(e.to_string(), "file"))?;
                drop(data);
                for event in events.drain(..) {
                    self.take_event(event, receiving).await?;
                }
            }
            pace.check(now, total).map_err(|rate| {
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "The upload arrived at {rate} bytes/s over the last 10 s, under \
                         batch.upload_min_bytes_per_s ({}).",
                        self.config.upload_min_bytes_per_s
                    ),
                )
            })?;
        }
        parser
            .finish()
            .map_err(|e| ApiError::bad(e.to_string(), "file"))
    }

    /// One parsed piece of the form.
    async fn take_event(&self, event: Event, receiving: &mut Receiving) -> Result<(), ApiError> {
        match event {
            Event::Field(name, value) => {
                if name == "purpose" {
                    check_purpose(Some(&value))?;
                    receiving.purpose = Some(value);
                }
            }
            Event::FileStart { filename, .. } => {
                receiving.saw_file = true;
                if let Some(filename) = filename {
                    receiving.meta.filename = filename;
                }
                let key = receiving.meta.object_key();
                let part = self.objects.part_bytes();
                receiving.upload = Some(ObjectUpload::new(self.objects.clone(), key, part));
            }
            Event::FileData(data) => {
                let Some(upload) = receiving.upload.as_mut() else {
                    return Ok(());
                };
                let limit = self.config.max_file_bytes as u64;
                if upload.written() + data.len() as u64 > limit {
                    return Err(too_large(limit));
                }
                // A frame larger than the slack takes its excess from the budget too.
                let needed = upload.pending_bytes() + data.len();
                let held = receiving.held.num_permits();
                if needed > held {
                    let more = take_budget(&self.bounds.body_budget, needed - held).await;
                    let more = more.ok_or_else(budget_spent)?;
                    receiving.held.merge(more);
                }
                upload.write(data).await.map_err(ApiError::store)?;
            }
            Event::FileEnd => {}
        }
        Ok(())
    }

    /// The body is complete: the form is checked, the object finished, the record written.
    async fn record(&self, mut receiving: Receiving) -> Answer {
        let checked = check_purpose(receiving.purpose.as_deref()).and_then(|()| {
            if receiving.saw_file {
                Ok(())
            } else {
                Err(ApiError::bad("missing the `file` part", "file"))
            }
        });
        let Some(upload) = receiving.upload.take() else {
            return Err(checked
                .err()
                .unwrap_or_else(|| ApiError::bad("missing the `file` part", "file")));
        };
        if let Err(error) = checked {
            upload.abort().await;
            return Err(error);
        }
        receiving.meta.bytes = upload.finish().await.map_err(ApiError::store)?;
        drop(receiving.held);
        let meta = receiving.meta;
        if let Err(error) = self.state.put_file(&meta).await {
            let _ = self.objects.delete(&meta.object_key()).await;
            return Err(ApiError::store(error));
        }
        tracing::info!(file = %meta.id, tenant = %meta.tenant, bytes = meta.bytes, "file uploaded");
        Ok(json_value(&meta.to_openai()))
    }
}

/// `bytes` of the budget, waiting up to `BUDGET_WAIT` for them.
async fn take_budget(budget: &Arc<Semaphore>, bytes: usize) -> Option<OwnedSemaphorePermit> {
    let bytes = u32::try_from(bytes).ok()?;
    if let Ok(permit) = budget.clone().try_acquire_many_owned(bytes) {
        return Some(permit);
    }
    let waited = tokio::time::timeout(BUDGET_WAIT, budget.clone().acquire_many_owned(bytes));
    waited.await.ok()?.ok()
}

fn budget_spent() -> ApiError {
    ApiError::overloaded(body_budget_spent().to_string())
}

fn check_purpose(purpose: Option<&str>) -> Result<(), ApiError> {
    match purpose {
        Some("batch") => Ok(()),
        Some(other) => Err(ApiError::bad(
            format!("purpose `{other}` is not served here: this gateway takes `batch` files"),
            "purpose",
        )),
        None => Err(ApiError::bad(
            "missing the `purpose` field (`batch`)",
            "purpose",
        )),
    }
}

fn too_large(limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("The file is larger than {limit} bytes, the largest accepted."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_under_the_floor_is_refused_and_a_fast_one_restarts_the_window() {
        let start = Instant::now();
        let mut pace = Pace::new(1000, start);
        assert_eq!(pace.check(start + Duration::from_secs(5), 0), Ok(()));
        let ten = start + RATE_WINDOW;
        assert_eq!(pace.check(ten, 20_000), Ok(()));
        assert_eq!(pace.window_end(), ten + RATE_WINDOW);
        let twenty = ten + RATE_WINDOW;
        assert_eq!(pace.check(twenty, 25_000), Err(500));
        let mut off = Pace::new(0, start);
        assert_eq!(off.check(start + RATE_WINDOW * 3, 0), Ok(()));
    }
}
