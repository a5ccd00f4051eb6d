//! `Stall`: a connection's response bodies that hold a frame their client has not taken, so
//! a stream whose client stops reading is cut even where the socket never fills.
//!
//! On HTTP/2 a client that stops reading a stream stops granting it flow-control window: hyper
//! then stops pulling that body while the socket stays writable (pings answered, other streams
//! flowing), which the socket's write timeout (`write_timeout`) cannot see. What it can be told
//! from is the body: a body that handed hyper a frame and has not been polled again is waiting
//! on the client; one that was polled and returned `Pending` is waiting on its engine, which
//! never counts. The check runs once per `stream_write_timeout_ms` per connection (one timer,
//! as the idle timeout), so a stall is cut between one and two timeouts after it began.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Instant;

use crate::Body;
use crate::body::Reporting;
use crate::error::BoxError;
use crate::vocab::Report;

/// One connection's bodies waiting on the client, and when a body last made progress.
#[derive(Debug)]
pub struct Stall {
    waiting: AtomicUsize,
    progress_ms: AtomicU64,
    epoch: Instant,
}

/// A response body watched by its connection's [`Stall`].
struct Watched {
    inner: Body,
    stall: Arc<Stall>,
    /// A frame was handed over and the body has not been polled since.
    holding: bool,
}

impl Default for Stall {
    fn default() -> Self {
        Self {
            waiting: AtomicUsize::new(0),
            progress_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl Stall {
    /// `body`, watched.
    pub fn watch(self: &Arc<Self>, body: Body) -> Body {
        if body.is_end_stream() {
            return body;
        }
        Body::reporting(Watched {
            inner: body,
            stall: self.clone(),
            holding: false,
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Resolves once a body has waited on the client, with no body making progress, for
    /// `timeout` (found within one more `timeout`).
    pub async fn stalled_for(&self, timeout: Duration) {
        let timeout_ms = timeout.as_millis() as u64;
        loop {
            let progress = self.progress_ms.load(Ordering::Acquire);
            let now = self.now_ms();
            let waiting = self.waiting.load(Ordering::Acquire) > 0;
            if waiting && now >= progress + timeout_ms {
                return;
            }
            let next = if waiting {
                progress + timeout_ms
            } else {
                now + timeout_ms
            };
            tokio::time::sleep_until(self.epoch + Duration::from_millis(next)).await;
        }
    }

    fn release(&self, holding: &mut bool) {
        if std::mem::take(holding) {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        this.stall.release(&mut this.holding);
        let now = this.stall.now_ms();
        this.stall.progress_ms.fetch_max(now, Ordering::AcqRel);
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(Some(Ok(_)))) && !this.inner.is_end_stream() {
            this.holding = true;
            this.stall.waiting.fetch_add(1, Ordering::AcqRel);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Reporting for Watched {
    fn report(&self) -> Report {
        self.inner.report()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stall.release(&mut self.holding);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use http_body_util::{BodyExt, StreamBody};

    /// A body of `frames` frames, then one that never comes (an engine still generating).
    fn endless(frames: usize) -> Body {
        let ready = futures::stream::iter(
            (0..frames)
                .map(|_| Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"data: token\n\n")))),
        );
        Body::new(StreamBody::new(ready.chain(futures::stream::pending())))
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_the_client_does_not_take_is_a_stall() {
        let stall = Arc::new(Stall::default());
        let mut body = stall.watch(endless(3));
        body.frame().await.expect("a frame").expect("ok");
        let started = Instant::now();
        // The client takes no more: nothing polls the body again.
        stall.stalled_for(Duration::from_secs(2)).await;
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert!(started.elapsed() <= Duration::from_secs(4));
        drop(body);
        assert_eq!(stall.waiting.load(Ordering::Acquire), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_on_the_engine_is_not_a_stall() {
        let stall = Arc::new(Stall::default());
        let mut body = stall.watch(endless(1));
        body.frame().await.expect("a frame").expect("ok");
        // Polled again: now the body waits on its engine, for as long as that takes.
        let next = tokio::time::timeout(Duration::from_secs(60), body.frame()).await;
        assert!(next.is_err(), "no frame came");
        let stalled = tokio::time::timeout(
            Duration::from_secs(60),
            stall.stalled_for(Duration::from_secs(2)),
        )
        .await;
        assert!(stalled.is_err(), "a body waiting on its engine is no stall");
    }
}
