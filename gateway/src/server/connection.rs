//! What bounds a client connection: the pod's cap on open connections (refused with a 503
//! and closed at once past it; past its client's cap, `clients`, with a 429), the idle
//! timeout (no request open for that long: closed gracefully, GOAWAY on HTTP/2, whose
//! connections hyper's header timeout does not cover), and the drain at shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::error_json;

/// The pod's open client connections and its cap.
#[derive(Debug)]
pub struct ConnectionLimit {
    max: usize,
    open: AtomicUsize,
    refused: AtomicU64,
    closed: Notify,
}

/// One open connection, counted until dropped.
#[derive(Debug)]
pub struct ConnectionSlot(Arc<ConnectionLimit>);

impl ConnectionLimit {
    /// At most `max` connections at once.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            open: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            closed: Notify::new(),
        }
    }

    /// Counts a new connection, or `None` when the pod is at its cap.
    pub fn open(self: &Arc<Self>) -> Option<ConnectionSlot> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionSlot(self.clone()))
    }

    /// Connections open now.
    pub fn open_now(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections refused at the cap so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Resolves once no connection is open.
    pub async fn all_closed(&self) {
        loop {
            let closed = self.closed.notified();
            if self.open_now() == 0 {
                return;
            }
            closed.await;
        }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.closed.notify_waiters();
        }
    }
}

/// Answers a connection over the pod's cap with a 503 and closes it, reading nothing.
pub async fn refuse(stream: TcpStream) {
    const BODY: &str = r#"{"error":{"message":"The gateway has too many open connections; retry shortly.","type":"server_error","param":null,"code":"overloaded"}}"#;
    answer_and_close(stream, "503 Service Unavailable", BODY).await;
}

/// Answers a connection over its client's cap with a 429 saying `message`, the same way.
pub async fn refuse_client(stream: TcpStream, message: String) {
    let body = error_json(
        &message,
        "rate_limit_error",
        None,
        Some("rate_limit_exceeded"),
    );
    answer_and_close(stream, "429 Too Many Requests", &body).await;
}

/// Writes the answer and closes, all within 100 ms whatever the client does: a refused
/// connection must cost the pod next to nothing. Awaited, not `try_write`: a socket just
/// handed to this thread's reactor has no readiness yet, and `try_write` would not even try.
async fn answer_and_close(mut stream: TcpStream, status: &str, body: &str) {
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_millis(100), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// A connection's open requests and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    open: AtomicUsize,
    last_ms: AtomicU64,
    epoch: Instant,
}

/// One open request on a connection, until its response body ends.
#[derive(Debug)]
pub struct RequestOpen(Arc<Activity>);

impl Default for Activity {
    fn default() -> Self {
        Self {
            open: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl Activity {
    /// Counts a request open on the connection.
    pub fn request(self: &Arc<Self>) -> RequestOpen {
        self.open.fetch_add(1, Ordering::AcqRel);
        RequestOpen(self.clone())
    }

    /// Resolves once the connection has had no request open for `idle`.
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Acquire));
            tokio::time::sleep_until(last + idle).await;
            let quiet = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
            if self.open.load(Ordering::Acquire) == 0 && self.epoch + quiet + idle <= Instant::now()
            {
                return;
            }
            if self.open.load(Ordering::Acquire) > 0 {
                // Busy: look again one idle period from now.
                let now_ms = self.epoch.elapsed().as_millis() as u64;
                self.last_ms.fetch_max(now_ms, Ordering::AcqRel);
            }
        }
    }
}

impl Drop for RequestOpen {
    fn drop(&mut self) {
        let now_ms = self.0.epoch.elapsed().as_millis() as u64;
        self.0.last_ms.fetch_max(now_ms, Ordering::AcqRel);
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_counts_open_connections() {
        let limit = Arc::new(ConnectionLimit::new(2));
        let a = limit.open().expect("1 of 2");
        let _b = limit.open().expect("2 of 2");
        assert!(limit.open().is_none());
        assert_eq!(limit.refused(), 1);
        drop(a);
        assert!(limit.open().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_means_no_request_open_for_the_whole_period() {
        let activity = Arc::new(Activity::default());
        let open = activity.request();
        let started = tokio::time::Instant::now();
        let idle = tokio::spawn({
            let activity = activity.clone();
            async move { activity.idle_for(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert!(!idle.is_finished(), "a request is open: not idle");
        drop(open);
        idle.await.expect("joins");
        assert!(started.elapsed() >= Duration::from_secs(35));
    }
}
