//! Accepting connections with bounds a server facing many clients needs: at most
//! `max_connections` open at once (the rest wait in the kernel's backlog until one closes), a
//! request's headers, and the idle wait for the next request on a keep-alive connection, within
//! the header timeout; HTTP/2 peers that stop answering pings closed; a graceful drain.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// How many connections, and how long a connection may sit without a request.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// Time to receive a request's headers, idle keep-alive wait included.
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` until `stop` resolves, then waits for open connections to
/// finish their requests (idle ones are closed at once).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    // HTTP/2 has no header timeout in hyper: a peer that vanished is found by its pings.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_timeout / 2)
        .keep_alive_timeout(limits.header_timeout / 2);
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // Streams are many small writes: without TCP_NODELAY, Nagle holds each one until the
        // client's delayed ACK (up to 40 ms), which shows as a TTFT floor and a jittery TPOT.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY on an accepted connection: {error}");
        }
        let router = router.clone();
        let service = hyper::service::service_fn(move |request| router.clone().oneshot(request));
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(error) = watched.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
