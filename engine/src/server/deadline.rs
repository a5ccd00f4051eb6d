//! A deadline on reading each request's body: a client that sends its headers and then
//! trickles (or never finishes) its body would otherwise hold a handler, and its connection,
//! forever.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// The error a body gives once its deadline passed (read back by `read_json` as a 408).
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

/// Middleware: every request's body must be read whole within `timeout` of its headers.
pub async fn limit_body_time(timeout: Duration, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = Body::new(Deadline {
        inner: body,
        sleep: Box::pin(tokio::time::sleep(timeout)),
        timeout,
    });
    next.run(Request::from_parts(parts, body)).await
}

/// A body that fails once `sleep` fires before its end.
struct Deadline {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
