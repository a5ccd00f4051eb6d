//! `UpstreamStream`: a replica's streaming response body as the gateway reads it. Its first
//! bytes are awaited before the response goes up the stack (a replica that fails before
//! sending any is retried like one that failed before its headers); after that, a gap longer
//! than the idle timeout between chunks, or a broken connection, ejects the replica and ends
//! the body with an error, which the failover layer turns into a continuation elsewhere.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::error::BoxError;
use crate::metrics::Metrics;
use crate::routing::{ModelPool, Replica, ReplicaState};

/// Why a replica's stream ended early.
#[derive(Debug, thiserror::Error)]
pub enum StreamBroke {
    /// The connection failed.
    #[error("the replica's stream broke: {0}")]
    Reset(#[source] hyper::Error),
    /// Nothing arrived for the idle timeout.
    #[error("the replica sent nothing for {0:?}")]
    Idle(Duration),
}

/// A replica's stream, failing on silence.
pub struct UpstreamStream {
    inner: Incoming,
    first: Option<Bytes>,
    idle_timeout: Duration,
    /// When the current wait fails, and how long that wait was allowed.
    idle: Pin<Box<Sleep>>,
    waited: Duration,
    replica: Arc<Replica>,
    pool: Arc<ModelPool>,
    metrics: Arc<Metrics>,
    model: String,
    ended: bool,
}

/// Who a stream comes from, for ejecting it and counting its failures.
pub struct StreamSource {
    pub replica: Arc<Replica>,
    pub pool: Arc<ModelPool>,
    pub metrics: Arc<Metrics>,
    pub model: String,
}

impl UpstreamStream {
    /// Reads `inner` until its first data frame, for at most `first_timeout`; later gaps may
    /// last `idle_timeout`. The error says why nothing came (the replica is ejected).
    pub async fn start(
        inner: Incoming,
        idle_timeout: Duration,
        first_timeout: Duration,
        source: StreamSource,
    ) -> Result<Self, StreamBroke> {
        let mut stream = Self {
            inner,
            first: None,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(first_timeout)),
            waited: first_timeout,
            replica: source.replica,
            pool: source.pool,
            metrics: source.metrics,
            model: source.model,
            ended: false,
        };
        let first = std::future::poll_fn(|cx| {
            loop {
                match stream.poll_typed(cx) {
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) if !data.is_empty() => return Poll::Ready(Ok(Some(data))),
                        _ => continue,
                    },
                    Poll::Ready(Some(Err(why))) => return Poll::Ready(Err(why)),
                    Poll::Ready(None) => return Poll::Ready(Ok(None)),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await;
        match first {
            Ok(first) => {
                stream.first = first;
                Ok(stream)
            }
            Err(why) => {
                stream.broke(&why);
                Err(why)
            }
        }
    }

    /// The next frame; an error when the connection failed or stayed silent too long.
    fn poll_typed(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamBroke>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                self.waited = self.idle_timeout;
                let deadline = Instant::now() + self.idle_timeout;
                self.idle.as_mut().reset(deadline);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(StreamBroke::Reset(error)))),
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => match self.idle.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(StreamBroke::Idle(self.waited)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    /// The replica failed: eject it (a health probe readmits it) and count the failure.
    fn broke(&mut self, why: &StreamBroke) {
        self.ended = true;
        let kind = match why {
            StreamBroke::Reset(_) => "stream",
            StreamBroke::Idle(_) => "idle",
        };
        self.metrics
            .upstream_error(&self.model, &self.replica.addr.url, kind);
        self.pool
            .set_replica_state(&self.replica, ReplicaState::Ejected);
        tracing::warn!(replica = %self.replica.addr.url, error = %why, "replica failed mid-stream");
    }
}

impl HttpBody for UpstreamStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        match this.poll_typed(cx) {
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(why))) => {
                this.broke(&why);
                Poll::Ready(Some(Err(Box::new(why))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.ended
    }
}
