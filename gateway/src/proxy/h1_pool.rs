//! A lean HTTP/1.1 keep-alive pool: idle connections per replica, reused in place.
//!
//! Why not hyper-util's legacy client: per request it clones itself, boxes its future and
//! spawns a task that waits for the connection to become idle again. Here a sender goes back
//! to the pool as soon as the response head arrives and is taken only once hyper says it is
//! ready (the previous body fully read), so a request costs no extra task or wake-up.
//!
//! Idle connections are kept per thread: a request takes one its own thread drives (the
//! connection task runs on the runtime that opened it), so with one runtime per thread
//! ([`crate::server::Workers`]) an upstream call never hands off to another thread.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Request, Response, Uri, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;

/// Idle connections kept per replica and thread; beyond this, finished ones are closed.
const MAX_IDLE_PER_REPLICA: usize = 1024;

/// Idle lists; threads beyond this many share them.
const SHARDS: usize = 64;

type IdleList = Mutex<HashMap<Authority, Vec<SendRequest<Full<Bytes>>>>>;

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    /// No connection could be opened (refused, unreachable, timed out).
    #[error("connect to {authority}: {message}")]
    Connect {
        /// `host:port`.
        authority: String,
        /// Why.
        message: String,
    },
    /// The connection failed while the request was in flight.
    #[error(transparent)]
    Exchange(#[from] hyper::Error),
}

/// HTTP/1.1 connections to every replica, keyed by `host:port`.
#[derive(Debug)]
pub struct H1Pool {
    shards: Box<[IdleList]>,
    connect_timeout: Duration,
}

impl H1Pool {
    /// An empty pool whose connects give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| IdleList::default()).collect(),
            connect_timeout,
        }
    }

    /// Sends `request` to `authority` on an idle connection, or a new one; a request an idle
    /// connection could not take (closed by the replica meanwhile) goes on a fresh one.
    /// An absolute URI is sent in origin form, with a `Host` header if it had none.
    pub async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
        authority: &Authority,
    ) -> Result<Response<Incoming>, H1Error> {
        origin_form(&mut request, authority);
        let authority = authority.clone();
        // This thread's list, fixed for the whole call even if the task moves meanwhile.
        let idle = &self.shards[current_shard()];
        if let Some(mut sender) = checkout(idle, &authority) {
            match sender.try_send_request(request).await {
                Ok(response) => {
                    checkin(idle, authority, sender);
                    return Ok(response);
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(failed.into_error().into()),
                },
            }
        }
        let mut sender = self.connect(&authority).await?;
        let response = sender.send_request(request).await?;
        checkin(idle, authority, sender);
        Ok(response)
    }

    async fn connect(&self, authority: &Authority) -> Result<SendRequest<Full<Bytes>>, H1Error> {
        let failed = |message: String| H1Error::Connect {
            authority: authority.to_string(),
            message,
        };
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(80);
        let connecting = tokio::net::TcpStream::connect((host, port));
        let stream = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(failed(error.to_string())),
            Err(_) => return Err(failed("timed out".into())),
        };
        stream
            .set_nodelay(true)
            .map_err(|e| failed(e.to_string()))?;
        // One flattened `write` per request, as towards clients (see `server.rs`).
        let (sender, connection) = http1::Builder::new()
            .writev(false)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream connection closed");
            }
        });
        Ok(sender)
    }
}

/// This thread's idle list.
fn current_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

/// An idle connection ready for a request; closed ones are dropped on the way.
fn checkout(idle: &IdleList, authority: &Authority) -> Option<SendRequest<Full<Bytes>>> {
    let mut idle = idle.lock().unwrap_or_else(|e| e.into_inner());
    let senders = idle.get_mut(authority)?;
    // Newest first: the most recently used connection is the likeliest to be warm. The
    // scan stops at the first ready one (no pass over the whole list per request).
    let mut at = senders.len();
    while at > 0 {
        at -= 1;
        if senders[at].is_closed() {
            senders.swap_remove(at);
        } else if senders[at].is_ready() {
            return Some(senders.swap_remove(at));
        }
    }
    None
}

fn checkin(idle: &IdleList, authority: Authority, sender: SendRequest<Full<Bytes>>) {
    let mut idle = idle.lock().unwrap_or_else(|e| e.into_inner());
    let senders = idle.entry(authority).or_default();
    if senders.len() < MAX_IDLE_PER_REPLICA {
        senders.push(sender);
    }
}

/// HTTP/1.1 origin servers get `/path?query` and a `Host` header, not an absolute URI.
fn origin_form(request: &mut Request<Full<Bytes>>, authority: &Authority) {
    if request.uri().scheme().is_none() && request.uri().authority().is_none() {
        return;
    }
    if !request.headers().contains_key(header::HOST)
        && let Ok(host) = HeaderValue::from_str(authority.as_str())
    {
        request.headers_mut().insert(header::HOST, host);
    }
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = Uri::from(path);
}
