//! `WriteTimeout`: a client socket whose writes fail once they have made no progress for
//! `stream_write_timeout_ms`, so a client that stops reading a stream is cut.
//!
//! Why on the socket, not the response body: hyper writes the body, and while the client's
//! receive window and the socket's send buffer are full, hyper simply stops polling the body;
//! the body cannot tell a stalled client from a slow engine. The socket can: a write that
//! returns `Pending` means the client is not reading. The clock starts at the first such
//! write and stops at the next write that moves bytes, as nginx's `send_timeout` and Envoy's
//! stream idle timeout count; a client that reads slowly but steadily is never cut. When the
//! write fails, hyper ends the connection with an error and drops its response bodies, which
//! cancels their upstream calls (the engine frees the sequences) and releases every guard the
//! body carries (admission, in-flight, per-client slots; the limits settle what was sent).
//! HTTP/1 and HTTP/2 alike write through this socket; an HTTP/2 client can also stall one
//! stream by withholding its window while the socket stays writable, which `stall` watches.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A stream whose writes time out after `timeout` without progress.
#[derive(Debug)]
pub struct WriteTimeout<S> {
    inner: S,
    timeout: Duration,
    /// Armed while a write is waiting on the client; made on the first stall only.
    stall: Option<Pin<Box<Sleep>>>,
    stalled: bool,
}

impl<S> WriteTimeout<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            stall: None,
            stalled: false,
        }
    }

    /// Passes a write's outcome on, starting the clock on a stall and stopping it on
    /// progress; fails the write once the clock runs out.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = false;
            return polled;
        }
        let deadline = Instant::now() + self.timeout;
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.stalled {
            stall.as_mut().reset(deadline);
            self.stalled = true;
        }
        ready!(stall.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client read nothing for {} ms (stream_write_timeout_ms)",
                self.timeout.as_millis()
            ),
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_is_cut_after_the_timeout() {
        let (server, _client) = tokio::io::duplex(64);
        let mut server = WriteTimeout::new(server, Duration::from_secs(2));
        let started = Instant::now();
        let error = loop {
            if let Err(error) = server.write_all(b"data: token\n\n").await {
                break error;
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_steady_reader_is_never_cut() {
        let (server, mut client) = tokio::io::duplex(64);
        let reader = tokio::spawn(async move {
            let mut chunk = [0u8; 16];
            let mut total = 0;
            // One small read a second, against a 2 s timeout: always some progress.
            while let Ok(n @ 1..) = client.read(&mut chunk).await {
                total += n;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            total
        });
        let mut server = WriteTimeout::new(server, Duration::from_secs(2));
        for _ in 0..20 {
            server
                .write_all(b"data: token\n\n")
                .await
                .expect("progress");
        }
        drop(server);
        assert_eq!(reader.await.expect("joins"), 20 * 13);
    }
}
