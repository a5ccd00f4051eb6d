//! `Resuming`: the client's stream body, the async shell around the [`Splice`]. It cuts the
//! upstream stream into events, lets the splice rewrite each, and when the upstream breaks
//! (a reset, the idle timeout, an in-band error, an end before `[DONE]`) asks the splice what
//! next: end the stream, fail it in-band, or send a continuation to another replica and go on
//! reading from there.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use http::Response;
use http_body::{Body as HttpBody, Frame};

use super::continuation::{self, Api, Next};
use super::splice::{Continuation, Plan, Splice, Step};
use crate::Body;
use crate::body::Reporting;
use crate::error::{BoxError, GatewayError, error_json};
use crate::metrics::Metrics;
use crate::proxy::sse::{Cut, Events};
use crate::request::Parsed;
use crate::vocab::{Info, Report, Usage};

/// Sends a request down the stack below the failover layer (picker, upstream call).
pub type Reissue =
    Arc<dyn Fn(Parsed) -> BoxFuture<'static, Result<Response<Body>, GatewayError>> + Send + Sync>;

/// How a continuation is sent: the stack below, and the request to continue.
pub struct Resend {
    pub reissue: Reissue,
    /// The request as the first replica got it (its body is the template of continuations).
    pub template: Parsed,
    /// Attempts per continuation (a replica that fails before sending anything is skipped).
    pub max_attempts: u32,
    /// Continuations per request.
    pub max_resumptions: u32,
}

/// How logs and errors name a replica the inner service did not name.
const UNNAMED: &str = "(unnamed)";

/// A continuation on its way: the new stream, or why none came.
type Starting = BoxFuture<'static, Result<(Body, Option<String>), GatewayError>>;

/// The body the client reads.
pub struct Resuming {
    upstream: Option<Body>,
    /// The replica feeding `upstream` (excluded from later continuations), if it was named.
    replica: Option<String>,
    tried: Vec<String>,
    starting: Option<(Starting, Continuation)>,
    events: Events,
    cuts: Vec<Cut>,
    splice: Splice,
    /// An in-band error event from the upstream, sent as it came if no continuation follows.
    broken_event: Option<Bytes>,
    out: BytesMut,
    resend: Resend,
    api: Option<Api>,
    resumptions: u32,
    info: Info,
    /// The usage and the first content, as the layers above read them from the body.
    report: Report,
    metrics: Arc<Metrics>,
    ended: bool,
}

impl Resuming {
    /// Follows `upstream` (from `replica`) for the request `info`.
    pub fn new(
        upstream: Body,
        replica: Option<String>,
        resend: Resend,
        info: Info,
        metrics: Arc<Metrics>,
    ) -> Self {
        let api = Api::of_path(resend.template.http.uri().path());
        let shape = super::ask::shape(resend.template.http.body(), api);
        Self {
            upstream: Some(upstream),
            tried: replica.iter().cloned().collect(),
            replica,
            starting: None,
            events: Events::default(),
            cuts: Vec::new(),
            splice: Splice::new(info.client_wants_usage).with_shape(shape),
            broken_event: None,
            out: BytesMut::new(),
            resend,
            api,
            resumptions: 0,
            info,
            report: Report::default(),
            metrics,
            ended: false,
        }
    }

    /// Passes a chunk of the upstream stream through the splice; true when it broke in-band
    /// (the events after the break are dropped: a continuation replaces them).
    fn feed(&mut self, data: Bytes) -> bool {
        let mut cuts = std::mem::take(&mut self.cuts);
        self.events.cut(data, &mut cuts);
        let mut broken = false;
        for cut in cuts.drain(..) {
            if broken {
                continue;
            }
            let (whole, text_len) = match cut {
                Cut::Event { whole, text_len } => (whole, text_len),
                Cut::Unended(bytes) => {
                    self.out.extend_from_slice(&bytes);
                    continue;
                }
            };
            let (step, usage) = self.splice.event(&whole, text_len);
            if let Some(usage) = usage {
                self.report.usage = Some(usage);
            }
            match step {
                Step::Forward(bytes) => {
                    self.out.extend_from_slice(&bytes);
                    // Time to first token as the user sees it: the first text or tool call,
                    // not the role-only chunk a chat stream opens with before prefill.
                    if self.splice.has_content() && self.report.first_content.is_none() {
                        self.report.first_content = Some(Instant::now());
                    }
                }
                Step::Skip => {}
                Step::Broken => {
                    self.broken_event = Some(whole);
                    broken = true;
                }
            }
        }
        // Kept for the next chunk: its allocation is reused.
        self.cuts = cuts;
        broken
    }

    /// The upstream stream broke (`why`): end, fail, or start a continuation.
    fn broke(&mut self, why: &str) {
        self.upstream = None;
        self.events = Events::default();
        let textual_ok = self.api.is_some();
        let mut plan = self.splice.plan(textual_ok);
        if let Plan::Resume(_) = plan
            && self.resumptions >= self.resend.max_resumptions
        {
            plan = Plan::Fail("no continuation left in this request's budget");
        }
        let model = self.info.model.clone();
        match plan {
            Plan::End => {
                self.count("none", "ended");
                self.end();
            }
            Plan::Fail(reason) => {
                tracing::warn!(replica = self.replica.as_deref().unwrap_or(UNNAMED), %why, reason, "stream lost");
                self.count("none", "failed");
                self.fail(why, reason);
            }
            Plan::Resume(how) => {
                let next = self.api.ok_or("not a generation endpoint").and_then(|api| {
                    let original = self.resend.template.http.body();
                    continuation::body(original, api, how, &self.splice)
                });
                match next {
                    Ok(next) => {
                        tracing::info!(replica = self.replica.as_deref().unwrap_or(UNNAMED), %why, continuation = how.as_str(), %model, "stream continues elsewhere");
                        let start = self.start(next);
                        self.starting = Some((start, how));
                    }
                    Err(reason) => {
                        self.count(how.as_str(), "failed");
                        self.fail(why, reason);
                    }
                }
            }
        }
    }

    /// Sends the continuation `body`, excluding the replicas tried so far; waits for a ready
    /// replica as long as the request's own queue timeout allows, counted from now.
    fn start(&mut self, next: Next) -> Starting {
        let mut template = copy_with_body(&self.resend.template, next.body, &self.tried);
        if self.api != Some(next.api) {
            at_path(&mut template, next.api);
        }
        let reissue = self.resend.reissue.clone();
        let attempts = self.resend.max_attempts.max(1);
        let wait = self
            .info
            .deadline
            .saturating_duration_since(self.info.arrival);
        let deadline = Instant::now() + wait;
        let mut tried = self.tried.clone();
        Box::pin(async move {
            let mut attempt = 0;
            loop {
                let request = copy_with_body(&template, template.http.body().clone(), &tried);
                match reissue(request).await {
                    Ok(response) if !response.status().is_success() => {
                        // The replica refused the continuation itself (a 4xx): no other will
                        // take it better.
                        return Err(GatewayError::Upstream {
                            replica: super::upstream_of(&response)
                                .unwrap_or_else(|| UNNAMED.to_string()),
                            message: format!("the continuation was answered {}", response.status()),
                            retryable: false,
                            status: http::StatusCode::BAD_GATEWAY,
                        });
                    }
                    Ok(response) => {
                        let replica = super::upstream_of(&response);
                        return Ok((response.into_body(), replica));
                    }
                    // No replica to take it yet (all failed, or starting): wait for one.
                    Err(GatewayError::NoReplicaLeft { .. }) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(error)
                        if error.is_retryable()
                            && attempt + 1 < attempts
                            && Instant::now() < deadline =>
                    {
                        attempt += 1;
                        tried.extend(error.replica().map(str::to_string));
                    }
                    Err(error) => return Err(error),
                }
            }
        })
    }

    /// A continuation answered (`Ok`) or could not be had.
    fn started(&mut self, how: Continuation, result: Result<(Body, Option<String>), GatewayError>) {
        match result {
            Ok((body, replica)) => {
                self.resumptions += 1;
                self.count(how.as_str(), "resumed");
                self.splice.resumed(how);
                self.tried.extend(replica.clone());
                self.replica = replica;
                self.broken_event = None;
                self.upstream = Some(body);
            }
            Err(error) => {
                self.count(how.as_str(), "failed");
                let why = format!("no replica could continue it: {error}");
                self.fail(&why, "the continuation failed");
            }
        }
    }

    /// Ends the client's stream as a complete answer.
    fn end(&mut self) {
        if !self.splice.is_done() {
            self.out.extend_from_slice(b"data: [DONE]\n\n");
        }
        self.count_own_usage();
        self.ended = true;
    }

    /// An answer whose engine sent no usage (it ignores `include_usage`) is counted by the
    /// gateway itself, and the metrics say so: the prompt as estimated from its characters,
    /// the completion a token per chunk with text (engines stream a token a chunk).
    fn count_own_usage(&mut self) {
        let chunks = self.splice.text_chunks();
        if self.report.usage.is_none() && chunks > 0 {
            self.report.usage = Some(Usage {
                prompt_tokens: self.info.estimated_prompt_tokens,
                completion_tokens: chunks,
                cached_tokens: 0,
            });
            self.report.estimated = true;
        }
    }

    /// What reached the client so far, as the gateway counts it: the prompt as estimated, a
    /// token per id (or chunk with text) sent.
    fn sent_usage(&self) -> Usage {
        let sent = (self.splice.token_ids().len() as u64).max(self.splice.text_chunks());
        Usage {
            prompt_tokens: self.info.estimated_prompt_tokens,
            completion_tokens: sent,
            cached_tokens: 0,
        }
    }

    /// Ends the client's stream with an error event (the upstream's own, when it sent one).
    /// The answer is charged for what reached the client (no engine reported usage for it):
    /// neither the whole reservation nor nothing.
    fn fail(&mut self, why: &str, reason: &str) {
        if self.report.usage.is_none() {
            self.report.usage = Some(self.sent_usage());
        }
        match self.broken_event.take() {
            Some(event) => self.out.extend_from_slice(&event),
            None => {
                let message = format!(
                    "The model replica failed while streaming ({why}); the answer could not be continued: {reason}."
                );
                let json = error_json(&message, "server_error", None, Some("upstream_error"));
                self.out
                    .extend_from_slice(format!("data: {json}\n\n").as_bytes());
            }
        }
        self.end();
    }

    fn count(&self, continuation: &'static str, result: &'static str) {
        self.metrics
            .stream_interrupted(&self.info.model, continuation, result);
    }
}

/// Sends `request` to `api`'s endpoint instead of its own (a chat continued as a completion).
fn at_path(request: &mut Parsed, api: Api) {
    let uri = request.http.uri();
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static(api.path()));
    if let Ok(uri) = http::Uri::from_parts(parts) {
        *request.http.uri_mut() = uri;
    }
}

/// A copy of `template` with `body`, `tried` excluded.
fn copy_with_body(template: &Parsed, body: Bytes, tried: &[String]) -> Parsed {
    let mut copy = template.copy_with_body(body);
    copy.exclude = tried.to_vec();
    copy
}

impl HttpBody for Resuming {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if !this.out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(this.out.split().freeze()))));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            if let Some((starting, how)) = &mut this.starting {
                let how = *how;
                match starting.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(result) => {
                        this.starting = None;
                        this.started(how, result);
                        continue;
                    }
                }
            }
            let Some(upstream) = &mut this.upstream else {
                this.ended = true;
                continue;
            };
            match Pin::new(upstream).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data()
                        && this.feed(data)
                    {
                        this.broke("the replica reported an error");
                    }
                }
                Poll::Ready(Some(Err(error))) => this.broke(&error.to_string()),
                Poll::Ready(None) => {
                    if this.splice.is_done() {
                        let rest = this.events.finish();
                        this.out.extend_from_slice(&rest);
                        this.count_own_usage();
                        this.ended = true;
                    } else {
                        // An unfinished event stays behind: a continuation's would follow it.
                        this.broke("the replica ended the stream early");
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.out.is_empty()
    }
}

impl Reporting for Resuming {
    fn report(&self) -> Report {
        if self.ended || self.report.usage.is_some() {
            return self.report.clone();
        }
        // Read before the end: the body is being dropped (its client left, or was cut for not
        // reading it), so the limits settle what was sent, not the whole reservation.
        Report {
            usage: Some(self.sent_usage()),
            estimated: true,
            ..self.report.clone()
        }
    }
}
