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
        if self.pending.is_empty()
            && (chunk.ends_with(b"\n\n") || chunk.ends_with(b"\r\n\r\n"))
            && !contains(&chunk, b"\"usage\"")
        {
            return chunk;
        }
        self.pending.extend_from_slice(&chunk);
        let mut end = 0;
        while let Some((_, next)) = next_event(&self.pending[end..]) {
            end += next;
        }
        if end == 0 {
            return Bytes::new();
        }
        let complete = self.pending.split_to(end).freeze();
        if !contains(&complete, b"\"usage\"") {
            return complete;
        }
        // Each event goes on with its own line endings, or not at all.
        let mut out = BytesMut::with_capacity(complete.len());
        let mut at = 0;
        while let Some((text, next)) = next_event(&complete[at..]) {
            if self.keep_event(&complete[at..at + text]) {
                out.extend_from_slice(&complete[at..at + next]);
            }
            at += next;
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

/// The first complete event of `bytes`: where its text ends and where the blank line that
/// ends it ends. Lines may end in `\n`, `\r\n` or `\r` (the SSE spec allows all three;
/// Python's sse-starlette writes `\r\n`): looking only for `\n\n` held a CRLF stream back
/// until its end. A `\r` at the very end may be half of a `\r\n`: the event waits for more.
fn next_event(bytes: &[u8]) -> Option<(usize, usize)> {
    let (mut at, mut line_start, mut text_end) = (0, 0, 0);
    while let Some(offset) = bytes[at..].iter().position(|&b| b == b'\n' || b == b'\r') {
        at += offset;
        let eol = match (bytes[at], bytes.get(at + 1)) {
            (b'\n', _) => 1,
            (_, Some(b'\n')) => 2,
            (_, Some(_)) => 1,
            (_, None) => return None,
        };
        // An empty line after at least one line ends the event.
        if at == line_start && at > 0 {
            return Some((text_end, at + eol));
        }
        text_end = at;
        at += eol;
        line_start = at;
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
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

#[cfg(test)]
mod tests {
    use super::next_event;

    fn events(mut bytes: &[u8]) -> Vec<(&[u8], &[u8])> {
        let mut out = Vec::new();
        while let Some((text, next)) = next_event(bytes) {
            out.push((&bytes[..text], &bytes[..next]));
            bytes = &bytes[next..];
        }
        out
    }

    #[test]
    fn events_end_at_a_blank_line_whatever_the_line_endings() {
        let lf: &[u8] = b"data: a\n\ndata: b\n\n";
        assert_eq!(
            events(lf),
            [
                (&b"data: a"[..], &b"data: a\n\n"[..]),
                (b"data: b", b"data: b\n\n")
            ]
        );
        let crlf: &[u8] = b"data: a\r\n\r\nevent: x\r\ndata: b\r\n\r\n";
        assert_eq!(
            events(crlf),
            [
                (&b"data: a"[..], &b"data: a\r\n\r\n"[..]),
                (b"event: x\r\ndata: b", b"event: x\r\ndata: b\r\n\r\n")
            ]
        );
        assert_eq!(events(b"data: a\r\r"), []);
        assert_eq!(
            events(b"data: a\r\rdata: b"),
            [(&b"data: a"[..], &b"data: a\r\r"[..])]
        );
    }

    #[test]
    fn an_unfinished_event_waits() {
        assert_eq!(next_event(b"data: a\n"), None);
        assert_eq!(next_event(b"data: a\r\n\r"), None);
        assert_eq!(next_event(b"data: a"), None);
        assert_eq!(next_event(b""), None);
    }
}
