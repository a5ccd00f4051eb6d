//! The admin listener (`--admin-listen`): `/metrics`, `/health` and every tenant's
//! `/v1/usage` for scrapers and operators, on a port of its own. `/metrics` names every served
//! model and every tenant with its usage and refusals, so it is never on the API port a
//! tenant's key (or anyone) reaches; there `/v1/usage` shows the key's own tenant only.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use super::Gateway;
use super::connection::{self, ConnectionLimit};
use crate::Body;
use crate::error::GatewayError;

/// Open admin connections at most: a scraper or two and a person with curl. Its own cap, so a
/// flood of API connections never keeps the scrape of that flood out.
const MAX_ADMIN_CONNECTIONS: usize = 64;

impl Gateway {
    /// Answers one request on the admin listener.
    pub fn handle_admin<B>(&self, request: &Request<B>) -> Response<Body> {
        match (request.method(), request.uri().path()) {
            (&Method::GET, "/metrics") => self.metrics_text(),
            (&Method::GET, "/health") => self.health(),
            (&Method::GET, "/v1/usage") => self.usage(None),
            (method, path) => {
                GatewayError::PathNotFound(format!("{method} {path}")).into_response()
            }
        }
    }
}

/// Serves the admin routes of `gateway` on `listener` until `shutdown` resolves. A scrape is
/// short, so nothing is drained: open admin connections end with the process.
pub async fn serve_admin(
    listener: TcpListener,
    gateway: Gateway,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let limit = Arc::new(ConnectionLimit::new(MAX_ADMIN_CONNECTIONS));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // As on the API port: a client that sends its headers slowly is closed after the timeout.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(gateway.header_timeout);
    let gateway = Arc::new(gateway);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let Some(slot) = limit.open() else {
            tokio::spawn(connection::refuse(stream));
            continue;
        };
        let gateway = gateway.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let response = gateway.handle_admin(&request);
            async move { Ok::<_, Infallible>(response) }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "admin connection ended with an error");
            }
        });
    }
}
