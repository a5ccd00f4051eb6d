//! `SseRelay`: passes an engine's SSE stream through event by event, reads its usage, strips
//! the usage chunk the client did not ask for, and ends with an error event if the replica
//! fails mid-stream.

mod events;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use hyper::body::Incoming;

use super::usage::parse_usage_json;
use crate::error::{BoxError, error_json};
use crate::metrics::Metrics;
use crate::request::Info;
use crate::routing::{ModelPool, Replica, ReplicaState};
use events::Events;

/// The relaying body.
pub struct SseRelay {
    inner: Incoming,
    events: Events,
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
            events: Events::default(),
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
        let (info, strip_usage) = (&self.info, self.strip_usage);
        self.events.push(chunk, b"\"usage\"", |event| {
            keep_event(info, strip_usage, event)
        })
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

/// Records usage found in `event` (one that mentions `"usage"`); false when the event is the
/// usage-only chunk the client did not ask for.
fn keep_event(info: &Info, strip_usage: bool, event: &[u8]) -> bool {
    let Some(json) = event
        .strip_prefix(b"data: ")
        .or_else(|| event.strip_prefix(b"data:"))
    else {
        return true;
    };
    match parse_usage_json(json) {
        Some((Some(usage), has_choices)) => {
            info.outcome.set_usage(usage);
            !strip_usage || has_choices
        }
        _ => true,
    }
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
                    let rest = this.events.finish();
                    return Poll::Ready((!rest.is_empty()).then(|| Ok(Frame::data(rest))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
