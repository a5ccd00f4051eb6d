//! The response body of the whole stack, and `Guarded`: a body that keeps a guard alive until
//! its last frame is produced.
//!
//! [`Body`] carries what its producer learned of the answer back to the layers above it: the
//! engine's usage and when the first generated content left ([`Report`]). The upstream call
//! and the failover stream fill it in; the limits and metrics layers read it when the body
//! ends. So the usage returns through the body itself: nothing below the limits layer writes
//! shared per-request state for it.
//!
//! Layers attach what must live as long as the response (an admission permit, a replica
//! lease, a limit settlement) by wrapping the body; the guard ends right after the final
//! frame is handed to hyper, or when the client goes away and hyper drops the body.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::vocab::{BoxError, Report};

/// A body that reports on its answer.
pub trait Reporting: HttpBody<Data = Bytes, Error = BoxError> + Send + 'static {
    /// What is known so far (see [`Report`]).
    fn report(&self) -> Report;
}

/// The response body type of the whole stack: any body, plus its [`Report`].
pub struct Body(Pin<Box<dyn Reporting>>);

impl Body {
    /// A body that reports nothing (an error, a health answer, a file).
    pub fn new<B>(inner: B) -> Self
    where
        B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        Self::with_report(inner, Report::default())
    }

    /// Any body, with what is known of it from the start (the replica that answers it).
    pub fn with_report<B>(inner: B, report: Report) -> Self
    where
        B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        Self::reporting(Fixed {
            inner: inner.map_err(Into::into),
            report,
        })
    }

    /// A whole answer, with what it is known to report.
    pub fn full(bytes: Bytes, report: Report) -> Self {
        Self::reporting(Fixed {
            inner: http_body_util::Full::new(bytes).map_err(|never| match never {}),
            report,
        })
    }

    /// A body that reports for itself.
    pub fn reporting(body: impl Reporting) -> Self {
        Self(Box::pin(body))
    }

    /// What the body's producer learned of the answer so far.
    pub fn report(&self) -> Report {
        self.0.report()
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("report", &self.report())
            .finish()
    }
}

/// A body whose report is known when it is made.
struct Fixed<B> {
    inner: B,
    report: Report,
}

impl<B> HttpBody for Fixed<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Reporting for Fixed<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin + Send + 'static,
{
    fn report(&self) -> Report {
        self.report.clone()
    }
}

/// A body with a guard that ends with it.
pub struct Guarded<G: Send + 'static> {
    inner: Body,
    guard: Option<G>,
    /// Called with the guard and the body's report when the body ends or is dropped.
    end: fn(G, Report),
    /// How long the request waited in the admission queue, added to the body's report.
    queue_wait: Option<Duration>,
}

impl<G: Send + 'static> Guarded<G> {
    /// Wraps `inner` so that `guard` lives until the body ends or is dropped.
    pub fn wrap(inner: Body, guard: G) -> Body {
        Self::settle_with(inner, guard, |guard, _| drop(guard))
    }

    /// Wraps `inner` as [`wrap`](Self::wrap) does, its report adding that its request waited
    /// `wait` in the admission queue (for the metrics layer above).
    pub fn queued(inner: Body, guard: G, wait: Duration) -> Body {
        Body::reporting(Guarded {
            inner,
            guard: Some(guard),
            end: |guard, _| drop(guard),
            queue_wait: Some(wait),
        })
    }

    /// Wraps `inner` so that `end` gets `guard` and the body's final report when the body
    /// ends, or what was known when it is dropped (the client went away).
    pub fn settle_with(inner: Body, guard: G, end: fn(G, Report)) -> Body {
        if inner.is_end_stream() {
            end(guard, inner.report());
            return inner;
        }
        Body::reporting(Guarded {
            inner,
            guard: Some(guard),
            end,
            queue_wait: None,
        })
    }

    fn finish(&mut self) {
        if let Some(guard) = self.guard.take() {
            (self.end)(guard, self.report());
        }
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
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.finish(),
            // hyper may not poll again after a frame that completes a sized body.
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.finish(),
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

impl<G: Send + 'static> Reporting for Guarded<G> {
    fn report(&self) -> Report {
        let report = self.inner.report();
        match self.queue_wait {
            Some(wait) => Report {
                queue_wait: Some(wait),
                ..report
            },
            None => report,
        }
    }
}

impl<G: Send + 'static> Drop for Guarded<G> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<G: Send + 'static> Unpin for Guarded<G> {}

/// The future of a call whose response body keeps `guard` until it ends ([`Guarded::wrap`]);
/// if the call fails, the guard goes at once. What a layer that only holds something for the
/// response's life returns, unboxed: an `async` block here cost an allocation and a move per
/// request.
pub struct GuardResponse<F, G> {
    call: F,
    guard: Option<G>,
}

impl<F, G> GuardResponse<F, G> {
    /// `call`, its response's body then holding `guard`.
    pub fn new(call: F, guard: G) -> Self {
        Self {
            call,
            guard: Some(guard),
        }
    }
}

impl<F, G, E> Future for GuardResponse<F, G>
where
    F: Future<Output = Result<http::Response<Body>, E>> + Unpin,
    G: Send + Unpin + 'static,
{
    type Output = Result<http::Response<Body>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let response = std::task::ready!(Pin::new(&mut this.call).poll(cx))?;
        Poll::Ready(Ok(match this.guard.take() {
            Some(guard) => response.map(|body| Guarded::wrap(body, guard)),
            // Polled again after it completed: nothing left to hold.
            None => response,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::vocab::Usage;

    static ENDED: Mutex<Vec<(u32, Option<Usage>)>> = Mutex::new(Vec::new());

    fn record(id: u32, report: Report) {
        ENDED.lock().expect("lock").push((id, report.usage));
    }

    fn ended(id: u32) -> Vec<Option<Usage>> {
        let ended = ENDED.lock().expect("lock");
        ended
            .iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, u)| *u)
            .collect()
    }

    const USAGE: Usage = Usage {
        prompt_tokens: 7,
        completion_tokens: 3,
        cached_tokens: 2,
    };

    /// A two-frame body that reports its usage only once its last frame is out, as a stream
    /// with a usage chunk at its end does.
    struct Streamed(u8);

    impl HttpBody for Streamed {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            if self.0 == 2 {
                return Poll::Ready(None);
            }
            self.0 += 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    impl Reporting for Streamed {
        fn report(&self) -> Report {
            Report {
                usage: (self.0 == 2).then_some(USAGE),
                ..Report::default()
            }
        }
    }

    #[tokio::test]
    async fn guards_get_the_report_the_body_ends_with_through_every_wrapper() {
        let body = Body::reporting(Streamed(0));
        let body = Guarded::settle_with(body, 1u32, record);
        let body = Guarded::wrap(body, ());
        assert_eq!(body.report().usage, None, "not known before the end");
        let bytes = body.collect().await.expect("body").to_bytes();
        assert_eq!(&bytes[..], b"xx");
        assert_eq!(
            ended(1),
            vec![Some(USAGE)],
            "settled once, with the final usage"
        );
    }

    #[tokio::test]
    async fn a_body_dropped_early_settles_with_what_was_known() {
        let body = Body::reporting(Streamed(0));
        let mut body = Guarded::settle_with(body, 2u32, record);
        let first = body.frame().await.expect("a frame").expect("data");
        assert!(first.is_data());
        drop(body);
        assert_eq!(
            ended(2),
            vec![None],
            "the client left before the usage came"
        );
    }

    #[tokio::test]
    async fn the_queue_wait_rides_up_in_the_report_through_the_wrappers_above_it() {
        let waited = Some(Duration::from_millis(40));
        let body = Guarded::queued(
            Body::reporting(Streamed(0)),
            6u32,
            Duration::from_millis(40),
        );
        let mut body = Guarded::wrap(body, ());
        assert_eq!(body.report().queue_wait, waited, "known from the head on");
        while body.frame().await.is_some() {}
        let report = body.report();
        assert_eq!(
            report.usage,
            Some(USAGE),
            "the answer's usage passes through"
        );
        assert_eq!(report.queue_wait, waited);
    }

    #[tokio::test]
    async fn a_whole_answer_reports_from_the_start() {
        let report = Report {
            usage: Some(USAGE),
            estimated: true,
            ..Report::default()
        };
        let body = Body::full(Bytes::from_static(b"{}"), report.clone());
        assert_eq!(body.report(), report, "known before the first frame");
        let body = Guarded::settle_with(body, 3u32, record);
        body.collect().await.expect("body");
        assert_eq!(ended(3), vec![Some(USAGE)]);
        let empty = Body::full(Bytes::new(), report);
        let _ = Guarded::settle_with(empty, 4u32, record);
        assert_eq!(
            ended(4),
            vec![Some(USAGE)],
            "an empty body ends as it is wrapped"
        );
    }

    /// Counts its own drops.
    struct Held(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for Held {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_guarded_response_holds_its_guard_until_the_body_ends_or_the_call_fails() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let drops = std::sync::Arc::new(AtomicUsize::new(0));
        let answer = async { Ok::<_, ()>(http::Response::new(Body::reporting(Streamed(0)))) };
        let call = GuardResponse::new(Box::pin(answer), Held(drops.clone()));
        let mut body = call.await.expect("response").into_body();
        assert_eq!(drops.load(Ordering::SeqCst), 0, "held while the body runs");
        body.frame().await.expect("a frame").expect("data");
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        body.collect().await.expect("the rest");
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "released at the body's end"
        );

        let failed = async { Err::<http::Response<Body>, _>("refused") };
        let call = GuardResponse::new(Box::pin(failed), Held(drops.clone()));
        assert_eq!(call.await.err(), Some("refused"));
        assert_eq!(
            drops.load(Ordering::SeqCst),
            2,
            "released when the call fails"
        );
    }
}
