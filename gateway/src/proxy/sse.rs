//! `SseRelay`: passes an engine's SSE stream through event by event, reads its usage, strips
//! the usage chunk the client did not ask for, and ends with an error event if the replica
//! fails mid-stream.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame};
use hyper::body::Incoming;

use super::usage::parse_usage_json;
use crate::error::{BoxError, error_json};
use crate::metrics::Metrics;
use crate::request::Info;
use crate::routing::{ModelPool, Replica, ReplicaState};

/// The relaying body.
pub struct SseRelay {
    inner: Incoming,
    /// Bytes of an event not yet terminated by a blank line.
    pending: BytesMut,
    strip_usage: bool,
    info: Info,
    replica: Arc<Replica>,
    pool: Arc<ModelPool>,
    metrics: Arc<Metrics>,
    done: bool,
}

impl SseRelay {
    /// Relays `inner` from `replica`.
    pub fn new(
        inner: Incoming,
        info: Info,
        replica: Arc<Replica>,
        pool: Arc<ModelPool>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let strip_usage = !info.client_wants_usage;
        Self {
            inner,
            pending: BytesMut::new(),
            strip_usage,
            info,
            replica,
            pool,
            metrics,
            done: false,
        }
    }

    /// Takes a chunk; returns the complete events to forward (maybe empty).
    fn relay(&mut self, chunk: Bytes) -> Bytes {
        // Fast path: whole events, no usage in them, nothing pending: forward as is.
        if self.pending.is_empty() && chunk.ends_with(b"\n\n") && !contains(&chunk, b"\"usage\"") {
            return chunk;
        }
        self.pending.extend_from_slice(&chunk);
        let Some(end) = rfind(&self.pending, b"\n\n") else {
            return Bytes::new();
        };
        let complete = self.pending.split_to(end + 2).freeze();
        if !contains(&complete, b"\"usage\"") {
            return complete;
        }
        let mut out = BytesMut::with_capacity(complete.len());
        for event in split_events(&complete) {
            if !self.keep_event(event) {
                continue;
            }
            out.extend_from_slice(event);
            out.extend_from_slice(b"\n\n");
        }
        out.freeze()
    }

    /// Records usage found in `event`; false when the event is the usage-only chunk the
    /// client did not ask for.
    fn keep_event(&self, event: &[u8]) -> bool {
        let Some(json) = event
            .strip_prefix(b"data: ")
            .or_else(|| event.strip_prefix(b"data:"))
        else {
            return true;
        };
        if !contains(json, b"\"usage\"") {
            return true;
        }
        match parse_usage_json(json) {
            Some((Some(usage), has_choices)) => {
                self.info.outcome.set_usage(usage);
                !self.strip_usage || has_choices
            }
            _ => true,
        }
    }

    /// The replica failed mid-stream: eject it and tell the client in-band.
    fn fail(&mut self, error: &hyper::Error) -> Bytes {
        self.done = true;
        if self.replica.set_state(ReplicaState::Ejected) {
            self.pool.capacity_changed();
        }
        self.metrics
            .upstream_error(&self.info.model, &self.replica.addr.url, "stream");
        tracing::warn!(replica = %self.replica.addr.url, %error, "replica failed mid-stream");
        let message = format!("The model replica failed while streaming: {error}");
        let json = error_json(&message, "server_error", None, Some("upstream_error"));
        Bytes::from(format!("data: {json}\n\ndata: [DONE]\n\n"))
    }
}

/// Events of a block ending in a blank line (the block without its final `\n\n`).
fn split_events(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    let trimmed = block.strip_suffix(b"\n\n").unwrap_or(block);
    SplitBlank {
        rest: Some(trimmed),
    }
}

struct SplitBlank<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Iterator for SplitBlank<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        match find(rest, b"\n\n") {
            Some(i) => {
                self.rest = Some(&rest[i + 2..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

impl HttpBody for SseRelay {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let out = this.relay(data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    let out = this.fail(&error);
                    return Poll::Ready(Some(Ok(Frame::data(out))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    // An unterminated last event is passed on as it is.
                    let rest = this.pending.split().freeze();
                    return Poll::Ready((!rest.is_empty()).then(|| Ok(Frame::data(rest))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
