//! `Guarded`: a response body that keeps a guard alive until its last frame is produced.
//!
//! Layers attach what must live as long as the response (an admission permit, a replica
//! lease, a limit settlement) by wrapping the body; the guard drops right after the final
//! frame is handed to hyper, or when the client goes away and hyper drops the body.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::Body;
use crate::error::BoxError;

/// A body with a guard dropped at its end.
pub struct Guarded<G> {
    inner: Body,
    guard: Option<G>,
}

impl<G: Send + 'static> Guarded<G> {
    /// Wraps `inner` so that `guard` lives until the body ends or is dropped.
    pub fn wrap(inner: Body, guard: G) -> Body {
        if inner.is_end_stream() {
            drop(guard);
            return inner;
        }
        Guarded {
            inner,
            guard: Some(guard),
        }
        .boxed_unsync()
    }
}

impl<G: Send + 'static> HttpBody for Guarded<G> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.guard = None,
            // hyper may not poll again after a frame that completes a sized body.
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.guard = None,
            _ => {}
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

impl<G> Unpin for Guarded<G> {}
