//! Runs batches: every pod looks at the unfinished batches a few times a second, checks new
//! ones, claims lines while its models have room the interactive traffic leaves, sends each
//! line down the batch stack (the same parse, admission, routing and engines as interactive
//! requests, in the `batch` class), records each answer once, and writes the output and
//! error files when a batch ends (done, expired or cancelled).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokenscale_common::headers;
use tokio::task::AbortHandle;
use tower::ServiceExt;

use super::Batches;
use super::backlog::{self, Due};
use super::files::{error_line, write_up};
use super::pacing::Pacing;
use super::state::StateError;
use super::types::{
    BatchRecord, BatchStatus, Closing, FileMeta, LineResult, Progress, Purpose, now_ms, now_s,
    object_key,
};
use super::validate::{self, Line, LineError, Validated};
use crate::auth::{Authed, Tenant, TenantDirectory};
use crate::metrics::Metrics;
use crate::routing::{ModelPool, Router};
use crate::stack::BatchStack;

/// How often the runner looks at the batches when nothing wakes it.
const TICK: Duration = Duration::from_millis(250);

/// Most lines claimed in one go (per batch, per tick).
const CLAIM_AT_ONCE: u32 = 32;

/// A line refused for want of capacity (429, 502, 503, 504, a broken answer) goes back to
/// be claimed again; after this many tries it is answered as failed.
const MAX_TRIES: u32 = 5;

/// Largest answer kept for one line.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// What runs the batches on one pod.
pub struct Runner {
    batches: Arc<Batches>,
    stack: BatchStack,
    router: Arc<Router>,
    tenants: Arc<TenantDirectory>,
    /// Checked input of the batches this pod works on, by batch id.
    inputs: Mutex<HashMap<String, Arc<Validated>>>,
    /// Lines running on this pod, by batch id (their tasks, to stop them when the batch
    /// expires).
    running: Mutex<HashMap<String, HashMap<u32, AbortHandle>>>,
    /// Lines running on this pod, by model.
    in_flight: Mutex<HashMap<String, u64>>,
    /// Tries of lines refused for capacity, by (batch id, line).
    tries: Mutex<HashMap<(String, u32), u32>>,
    /// The interactive metrics, which pace batch lines.
    metrics: Arc<Metrics>,
    /// Each model's pace, by model.
    paces: Mutex<HashMap<String, Pacing>>,
}

/// What became of one try of a line.
enum Sent {
    /// An answer to record (2xx or not).
    Answer(LineResult),
    /// No capacity, or no whole answer: try again later.
    Again(String),
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runner {
    /// A runner sending lines down `stack` to the models of `router`.
    pub fn new(
        batches: Arc<Batches>,
        stack: BatchStack,
        router: Arc<Router>,
        tenants: Arc<TenantDirectory>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            batches,
            stack,
            router,
            tenants,
            inputs: Mutex::default(),
            running: Mutex::default(),
            in_flight: Mutex::default(),
            tries: Mutex::default(),
            metrics,
            paces: Mutex::default(),
        })
    }

    /// Runs until the process ends.
    pub async fn run(self: Arc<Self>) {
        let renew_every = self.batches.lease() / 3;
        let mut renewed = tokio::time::Instant::now();
        let mut failing = false;
        loop {
            tokio::select! {
                () = self.batches.wake.notified() => {}
                () = tokio::time::sleep(TICK) => {}
            }
            if renewed.elapsed() >= renew_every {
                renewed = tokio::time::Instant::now();
                self.renew().await;
            }
            match self.tick().await {
                Ok(()) => failing = false,
                // Said once per outage, not four times a second.
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(%error, "batch runner: the batch state cannot be read");
                }
                Err(_) => {}
            }
        }
    }

    /// One look at every unfinished batch.
    async fn tick(self: &Arc<Self>) -> Result<(), StateError> {
        let active = self.batches.state.active().await?;
        // Lines of a batch that ended elsewhere (another pod finalized it) stop here too.
        let ended: Vec<String> = lock(&self.running)
            .keys()
            .filter(|id| !active.iter().any(|b| &b.id == *id))
            .cloned()
            .collect();
        for id in ended {
            self.stop_lines(&id);
        }
        let mut statuses: HashMap<BatchStatus, u64> = HashMap::new();
        let mut due = Vec::new();
        for batch in active {
            *statuses.entry(batch.status).or_default() += 1;
            let progress = match batch.status {
                BatchStatus::InProgress => self.batches.state.progress(&batch.id).await?,
                _ => Progress::default(),
            };
            if batch.status == BatchStatus::InProgress
                && let Some(model) = &batch.model
            {
                due.push(Due {
                    model: model.clone(),
                    tokens: batch.backlog_output_tokens(progress.answered()),
                    deadline_s: batch.expires_at,
                    window_s: batch.window_s,
                });
            }
            let id = batch.id.clone();
            if let Err(error) = self.step(batch, progress).await {
                tracing::warn!(batch = %id, %error, "batch runner: a step failed; retried");
            }
        }
        let metrics = &self.batches.metrics;
        // Every routed model's pace follows its interactive latency all the time, so a
        // batch that starts finds the baseline already measured.
        for pool in self.router.pools() {
            let mine = lock(&self.in_flight).get(&pool.name).copied().unwrap_or(0);
            self.pace_of(&pool.name, &pool, mine);
        }
        metrics.set_statuses(statuses);
        metrics.set_backlog(backlog::required(now_s(), &due));
        for (model, n) in lock(&self.in_flight).iter() {
            metrics.set_in_flight(model, *n);
        }
        Ok(())
    }

    /// Advances one batch as far as it can go now.
    async fn step(
        self: &Arc<Self>,
        batch: BatchRecord,
        progress: Progress,
    ) -> Result<(), StateError> {
        match batch.status {
            BatchStatus::Validating => self.check(batch).await,
            BatchStatus::InProgress if now_s() >= batch.expires_at => {
                self.close(batch, Closing::Expired).await
            }
            BatchStatus::InProgress if progress.answered() >= batch.total => {
                self.close(batch, Closing::Completed).await
            }
            BatchStatus::InProgress => self.dispatch(&batch).await,
            BatchStatus::Cancelling => {
                let here = lock(&self.running)
                    .get(&batch.id)
                    .is_some_and(|l| !l.is_empty());
                if !here && self.batches.state.leased(&batch.id).await? == 0 {
                    self.close(batch, Closing::Cancelled).await?;
                }
                Ok(())
            }
            BatchStatus::Finalizing => {
                // An expired batch's running lines are stopped: their answers would not be
                // written, and they hold slots other work could use. (Cancel lets them
                // finish, as OpenAI's does.)
                if batch.closing == Some(Closing::Expired) {
                    self.stop_lines(&batch.id);
                }
                self.finalize(batch).await
            }
            _ => Ok(()),
        }
    }

    /// Stops the lines of batch `id` running here (dropping a request closes its upstream
    /// connection, which stops its generation).
    fn stop_lines(&self, id: &str) {
        if let Some(lines) = lock(&self.running).get(id) {
            for handle in lines.values() {
                handle.abort();
            }
        }
    }

    /// Validates a new batch's input: `in_progress`, or `failed` with every bad line.
    async fn check(self: &Arc<Self>, batch: BatchRecord) -> Result<(), StateError> {
        let mut next = batch.clone();
        next.version += 1;
        match self.validated(&batch, true).await {
            Ok(checked) => {
                let lines = &checked.lines;
                if let Some(refusal) = self.over_token_limit(&batch, lines).await? {
                    fail(&mut next, vec![refusal]);
                } else {
                    next.status = BatchStatus::InProgress;
                    next.in_progress_at = Some(now_s());
                    next.total = lines.len() as u32;
                    next.reserved_output_tokens =
                        lines.iter().map(|l| l.reserved_output_tokens).sum();
                    next.estimated_prompt_tokens =
                        lines.iter().map(|l| l.estimated_prompt_tokens).sum();
                    next.model = Some(checked.model.clone());
                }
            }
            Err(errors) => fail(&mut next, errors),
        }
        if self.batches.state.replace_batch(&next).await? {
            tracing::info!(batch = %next.id, status = next.status.as_str(), lines = next.total, "batch checked");
            self.batches.wake.notify_one();
        }
        Ok(())
    }

    /// The tenant's `max_enqueued_tokens` refusal, when this batch would pass it.
    async fn over_token_limit(
        &self,
        batch: &BatchRecord,
        lines: &[Line],
    ) -> Result<Option<LineError>, StateError> {
        let Some(tenant) = self.tenants.by_name(&batch.tenant) else {
            return Ok(None);
        };
        let Some(limit) = tenant.batch.max_enqueued_tokens else {
            return Ok(None);
        };
        let mine: u64 = lines
            .iter()
            .map(|l| l.estimated_prompt_tokens + l.reserved_output_tokens)
            .sum();
        let mut enqueued = 0;
        for other in self.batches.state.active().await? {
            if other.tenant == batch.tenant && other.id != batch.id {
                let progress = self.batches.state.progress(&other.id).await?;
                let total = u64::from(other.total.max(1));
                let left = u64::from(other.total.saturating_sub(progress.answered()));
                enqueued +=
                    (other.estimated_prompt_tokens + other.reserved_output_tokens) * left / total;
            }
        }
        Ok((enqueued + mine > limit).then(|| LineError {
            code: "token_limit_exceeded".into(),
            message: format!(
                "Enqueued token limit reached for tenant `{}`: this batch has about {mine} tokens \
                 (prompt estimate plus max_tokens), {enqueued} are already enqueued, and the \
                 limit is {limit}. Wait for a batch to finish, or send a smaller one.",
                batch.tenant
            ),
            param: None,
            line: None,
        }))
    }

    /// The input file's bytes.
    async fn input_bytes(&self, batch: &BatchRecord) -> Result<Bytes, LineError> {
        self.batches
            .objects
            .get(&object_key(&batch.input_file_id))
            .await
            .map_err(|error| LineError {
                code: "file_not_found".into(),
                message: format!("input file `{}`: {error}", batch.input_file_id),
                param: Some("input_file_id".into()),
                line: None,
            })
    }

    /// The batch's checked lines (cached); `strict`: with the tenant's model access as it
    /// is now (at validation), else any model (a running batch keeps going).
    async fn validated(
        &self,
        batch: &BatchRecord,
        strict: bool,
    ) -> Result<Arc<Validated>, Vec<LineError>> {
        if let Some(checked) = lock(&self.inputs).get(&batch.id) {
            return Ok(checked.clone());
        }
        let bytes = self.input_bytes(batch).await.map_err(|e| vec![e])?;
        let tenant = self.tenants.by_name(&batch.tenant);
        if strict && tenant.is_none() {
            return Err(vec![LineError {
                code: "invalid_tenant".into(),
                message: format!("tenant `{}` is no longer configured", batch.tenant),
                param: None,
                line: None,
            }]);
        }
        let (endpoint, limits, tokens) = (
            batch.endpoint,
            self.batches.validate_limits(),
            self.batches.tokens.clone(),
        );
        let checked = tokio::task::spawn_blocking(move || {
            let may_use =
                |model: &str| !strict || tenant.as_ref().is_some_and(|t| t.models.allows(model));
            validate::validate(&bytes, endpoint, &may_use, &limits, &tokens)
        })
        .await
        .map_err(|e| {
            vec![LineError {
                code: "internal_error".into(),
                message: e.to_string(),
                param: None,
                line: None,
            }]
        })??;
        let checked = Arc::new(checked);
        lock(&self.inputs).insert(batch.id.clone(), checked.clone());
        Ok(checked)
    }

    /// Moves a batch to `finalizing`, to end as `closing` says.
    async fn close(&self, batch: BatchRecord, closing: Closing) -> Result<(), StateError> {
        let mut next = batch;
        next.version += 1;
        next.status = BatchStatus::Finalizing;
        next.closing = Some(closing);
        next.finalizing_at = Some(now_s());
        if self.batches.state.replace_batch(&next).await? {
            self.batches.wake.notify_one();
        }
        Ok(())
    }

    /// The model's pace after taking the interval that may have ended into account.
    fn pace_of(&self, model: &str, pool: &ModelPool, mine: u64) -> u32 {
        let most = self.batches.config.max_concurrency;
        let mut paces = lock(&self.paces);
        let interactive = self.metrics.model(model);
        let pacing = paces.entry(model.to_string()).or_insert_with(|| {
            // Requests admitted beyond this pod's batch lines are interactive ones.
            let admitted = pool.snapshot().admitted as u64;
            Pacing::start(&interactive, mine > 0, admitted > mine, most)
        });
        pacing.roll(&interactive, mine > 0, most);
        pacing.pace.limit()
    }

    /// Claims and starts lines while the model has room.
    async fn dispatch(self: &Arc<Self>, batch: &BatchRecord) -> Result<(), StateError> {
        let Some(model) = batch.model.as_deref() else {
            return Ok(());
        };
        // A model this pod does not route: other pods (or a later config) run it.
        let Some(pool) = self.router.model(model) else {
            return Ok(());
        };
        let mine = lock(&self.in_flight).get(model).copied().unwrap_or(0);
        let most = self.batches.config.max_concurrency;
        let paced = self.pace_of(model, &pool, mine);
        self.batches.metrics.set_pace(model, paced);
        let cap = u64::from(most.min(paced)).saturating_sub(mine);
        let room = (pool.batch_room(self.batches.config.max_fill) as u64).min(cap);
        if room == 0 {
            return Ok(());
        }
        let checked = match self.validated(batch, false).await {
            Ok(checked) => checked,
            Err(errors) => {
                let reason = errors.first().map_or(String::new(), |e| e.message.clone());
                tracing::warn!(batch = %batch.id, %reason, "batch runner: the input cannot be read");
                return Ok(());
            }
        };
        if let Some(pacing) = lock(&self.paces).get_mut(model) {
            pacing.batch_ran = true;
        }
        let max = (room as u32).min(CLAIM_AT_ONCE);
        let claimed = self
            .batches
            .state
            .claim(
                &batch.id,
                batch.total,
                max,
                &self.batches.pod,
                self.batches.lease(),
            )
            .await?;
        for index in claimed {
            let Some(line) = checked.lines.get(index as usize) else {
                continue;
            };
            *lock(&self.in_flight).entry(model.to_string()).or_default() += 1;
            let job = Job {
                batch: batch.id.clone(),
                tenant: batch.tenant.clone(),
                model: model.to_string(),
                path: batch.endpoint.path(),
                index,
                custom_id: line.custom_id.clone(),
                body: Bytes::copy_from_slice(line.body.get().as_bytes()),
            };
            // Held across the spawn, so the line's slot (which takes it to leave) cannot
            // leave before it is entered.
            let mut running = lock(&self.running);
            let slot = Slot {
                runner: self.clone(),
                batch: batch.id.clone(),
                model: model.to_string(),
                index,
            };
            let task = tokio::spawn(self.clone().run_line(job, slot));
            running
                .entry(batch.id.clone())
                .or_default()
                .insert(index, task.abort_handle());
        }
        Ok(())
    }

    /// Runs one line and records its answer (or gives it back).
    async fn run_line(self: Arc<Self>, job: Job, _slot: Slot) {
        let sent = self.send(&job).await;
        let state = &self.batches.state;
        match sent {
            Sent::Answer(result) => self.record(&job, result).await,
            Sent::Again(reason) => {
                let key = (job.batch.clone(), job.index);
                let tries = {
                    let mut tries = lock(&self.tries);
                    let n = tries.entry(key.clone()).or_default();
                    *n += 1;
                    *n
                };
                if tries >= MAX_TRIES {
                    lock(&self.tries).remove(&key);
                    let result = error_result(
                        &job,
                        "capacity_unavailable",
                        &format!(
                            "No replica could take this request after {tries} tries: {reason}"
                        ),
                    );
                    self.record(&job, result).await;
                } else if let Err(error) = state.release(&job.batch, &[job.index]).await {
                    // The lease runs out instead, and the line is claimed again then.
                    tracing::warn!(batch = %job.batch, %error, "batch runner: a line could not be given back");
                }
            }
        }
    }

    /// Records an answer, retrying while the store is down (the line's lease is renewed
    /// meanwhile, since it is still in `running`).
    async fn record(&self, job: &Job, result: LineResult) {
        let mut wait = Duration::from_millis(100);
        for _ in 0..8 {
            match self
                .batches
                .state
                .record(&job.batch, job.index, &result)
                .await
            {
                Ok(first) => {
                    if first {
                        self.batches.metrics.answered(
                            &job.model,
                            &job.tenant,
                            result.ok,
                            result.prompt_tokens,
                            result.completion_tokens,
                        );
                    }
                    return;
                }
                Err(error) => {
                    tracing::warn!(batch = %job.batch, %error, "batch runner: an answer could not be recorded yet");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
        tracing::error!(batch = %job.batch, line = job.index, "batch runner: an answer was lost; the line runs again when its lease ends");
    }

    /// Sends one line down the batch stack and reads the whole answer.
    async fn send(&self, job: &Job) -> Sent {
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
        let body = match read_answer(response.into_body()).await {
            Ok(body) => body,
            Err(error) => return Sent::Again(format!("the answer broke off: {error}")),
        };
        if matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::BAD_GATEWAY
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT
        ) {
            return Sent::Again(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        let body: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
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

    /// Extends the leases of the lines running here (a line may run longer than a lease).
    async fn renew(&self) {
        let running: Vec<(String, Vec<u32>)> = lock(&self.running)
            .iter()
            .filter(|(_, lines)| !lines.is_empty())
            .map(|(id, lines)| (id.clone(), lines.keys().copied().collect()))
            .collect();
        for (id, lines) in running {
            let renewed = self
                .batches
                .state
                .renew(&id, &self.batches.pod, &lines, self.batches.lease())
                .await;
            if let Err(error) = renewed {
                tracing::warn!(batch = %id, %error, "batch runner: leases could not be renewed");
            }
        }
    }

    /// Writes the output and error files of a finalizing batch and ends it. One pod does it
    /// (it holds the batch's `finalizer` lease); if it dies, another takes over after the
    /// lease and writes the same files under the same ids.
    async fn finalize(&self, batch: BatchRecord) -> Result<(), StateError> {
        let now = now_ms();
        let mut batch = batch;
        // A local store has one gateway: a finalizer named there is this process or a
        // previous run of it (killed while writing), never a live peer.
        let shared = !matches!(self.batches.state, super::state::State::Local(_));
        let held_by_other = shared
            && batch
                .finalizer
                .as_ref()
                .is_some_and(|(pod, until)| pod != &self.batches.pod && *until > now);
        if held_by_other {
            return Ok(());
        }
        if batch
            .finalizer
            .as_ref()
            .is_none_or(|(pod, _)| pod != &self.batches.pod)
        {
            let mut taken = batch.clone();
            taken.version += 1;
            let until = now + self.batches.lease().as_millis() as u64;
            taken.finalizer = Some((self.batches.pod.clone(), until));
            if !self.batches.state.replace_batch(&taken).await? {
                return Ok(());
            }
            batch = taken;
        }
        let closing = batch.closing.unwrap_or(Closing::Completed);
        let results: HashMap<u32, LineResult> = self
            .batches
            .state
            .results(&batch.id)
            .await?
            .into_iter()
            .collect();
        let lines = if batch.total > 0 {
            match self.validated(&batch, false).await {
                Ok(lines) => Some(lines),
                Err(errors) => {
                    let reason = errors.first().map_or(String::new(), |e| e.message.clone());
                    tracing::warn!(batch = %batch.id, %reason, "finalizing without the input: unanswered lines are not listed");
                    None
                }
            }
        } else {
            None
        };
        let files = write_up(
            &batch,
            closing,
            &results,
            lines.as_ref().map(|c| &c.lines[..]),
        );
        let output_id = format!("file-{}-output", batch.id);
        let error_id = format!("file-{}-errors", batch.id);
        let objects = &self.batches.objects;
        let store = |e: super::objects::ObjectError| StateError::Io(std::io::Error::other(e));
        objects
            .put(&object_key(&output_id), Bytes::from(files.output))
            .await
            .map_err(store)?;
        let mut metas = vec![(output_id.clone(), files.output_bytes, "output")];
        if files.errors_count > 0 {
            objects
                .put(&object_key(&error_id), Bytes::from(files.errors))
                .await
                .map_err(store)?;
            metas.push((error_id.clone(), files.errors_bytes, "errors"));
        }
        for (id, bytes, kind) in metas {
            let meta = FileMeta {
                id,
                tenant: batch.tenant.clone(),
                bytes,
                created_at: now_s(),
                filename: format!("{}_{kind}.jsonl", batch.id),
                purpose: Purpose::BatchOutput,
            };
            self.batches.state.put_file(&meta).await?;
        }
        let mut done = batch.clone();
        done.version += 1;
        done.finalizer = None;
        done.progress = files.progress;
        done.output_file_id = Some(output_id);
        done.error_file_id = (files.errors_count > 0).then_some(error_id);
        let at = Some(now_s());
        match closing {
            Closing::Completed => (done.status, done.completed_at) = (BatchStatus::Completed, at),
            Closing::Expired => (done.status, done.expired_at) = (BatchStatus::Expired, at),
            Closing::Cancelled => (done.status, done.cancelled_at) = (BatchStatus::Cancelled, at),
        }
        if self.batches.state.replace_batch(&done).await? {
            tracing::info!(
                batch = %done.id,
                status = done.status.as_str(),
                completed = done.progress.completed,
                failed = done.progress.failed,
                "batch finished"
            );
            self.batches.state.forget_work(&done.id).await?;
            lock(&self.inputs).remove(&done.id);
            lock(&self.running).remove(&done.id);
            lock(&self.tries).retain(|(id, _), _| id != &done.id);
        }
        Ok(())
    }
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

/// A line running on this pod: leaving (answered, given back, or stopped) frees its place
/// in the runner's counts.
struct Slot {
    runner: Arc<Runner>,
    batch: String,
    model: String,
    index: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut running = lock(&self.runner.running);
        if let Some(lines) = running.get_mut(&self.batch) {
            lines.remove(&self.index);
            if lines.is_empty() {
                running.remove(&self.batch);
            }
        }
        drop(running);
        if let Some(n) = lock(&self.runner.in_flight).get_mut(&self.model) {
            *n = n.saturating_sub(1);
        }
    }
}

/// One line to run.
struct Job {
    batch: String,
    tenant: String,
    model: String,
    path: &'static str,
    index: u32,
    custom_id: String,
    body: Bytes,
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
fn error_result(job: &Job, code: &str, message: &str) -> LineResult {
    LineResult {
        ok: false,
        line: error_line(&line_id(job), &job.custom_id, code, message),
        prompt_tokens: 0,
        cached_tokens: 0,
        completion_tokens: 0,
    }
}

/// Marks a batch failed at validation with `errors`.
fn fail(batch: &mut BatchRecord, errors: Vec<LineError>) {
    batch.status = BatchStatus::Failed;
    batch.failed_at = Some(now_s());
    batch.errors = errors;
}
