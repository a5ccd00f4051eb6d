//! A local stand-in for the Hugging Face Hub that the fetch tests point `HF_ENDPOINT` at: it
//! serves a directory in the Hub's layout (`repo`) over the Hub's protocol: the revision
//! listing (`/api/models/ORG/REPO/revision/REV`), the resolve route (`/ORG/REPO/resolve/REV/
//! PATH`, with `X-Repo-Commit`, `ETag`, `X-Linked-Etag` and `X-Linked-Size` headers, and a 302
//! to a CDN on another port for LFS files, as the Hub does), byte ranges, gated access, and
//! the faults the tests need: a download cut after N bytes, a corrupted file, a server that
//! ignores ranges or lies about lengths (`send`). It counts the file bytes it sends and the
//! downloads in flight at once.
#![allow(dead_code)]

pub mod repo;
mod send;

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

use self::repo::{HashCache, revision};
pub use self::send::Ranges;
use self::send::send_file;

/// Who may read the repositories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Public,
    /// Gated: no token is a 401, another token a 403, this token reads.
    Gated(String),
}

/// One request the Hub (or its CDN) received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The first byte asked for with `Range: bytes=N-`.
    pub range_from: Option<u64>,
    pub authorization: bool,
    /// Body bytes sent (file contents only).
    pub body_bytes: u64,
    pub cdn: bool,
}

#[derive(Default)]
struct Faults {
    /// Path → the byte at which the next download that reaches it is cut (once).
    cut_once: HashMap<String, u64>,
    /// Paths served with one byte changed.
    corrupt: HashSet<String>,
    /// How `Range` requests are answered.
    ranges: Ranges,
    /// Bodies hold their first bytes until this many have been in flight at once (or
    /// `RENDEZVOUS_LIMIT` passed): see `TestHub::rendezvous`.
    rendezvous: Option<usize>,
}

struct State {
    root: PathBuf,
    access: Mutex<Access>,
    hashes: HashCache,
    faults: Mutex<Faults>,
    seen: Mutex<Vec<Seen>>,
    cdn: Mutex<Option<SocketAddr>>,
    /// File bytes handed to the connections so far (what a cut download really sent).
    sent: AtomicU64,
    /// File bodies being sent now, and the most at once.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running test Hub (its own thread and runtime, so sync and async tests can use it);
/// stops when dropped.
pub struct TestHub {
    pub addr: SocketAddr,
    pub cdn: SocketAddr,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for TestHub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type Body = BoxBody<Bytes, std::io::Error>;

fn full(status: StatusCode, text: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(
        Full::new(text.into())
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r
}

fn with_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let mut r = full(status, format!("{{\"error\": \"{message}\"}}"));
    r.headers_mut()
        .insert("x-error-code", HeaderValue::from_str(code).expect("header"));
    r.headers_mut().insert(
        "x-error-message",
        HeaderValue::from_str(message).expect("header"),
    );
    r
}

impl TestHub {
    /// Serves `root` (see `repo`) on 127.0.0.1, with its CDN on a second port.
    pub fn start(root: impl Into<PathBuf>) -> Self {
        let state = Arc::new(State {
            root: root.into(),
            access: Mutex::new(Access::Public),
            hashes: HashCache::default(),
            faults: Mutex::new(Faults::default()),
            seen: Mutex::new(Vec::new()),
            cdn: Mutex::new(None),
            sent: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let (addrs_tx, addrs_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = state.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("test hub runtime");
            runtime.block_on(serve(shared, addrs_tx, stopped));
        });
        let (addr, cdn) = addrs_rx.recv().expect("the test hub starts");
        Self {
            addr,
            cdn,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The `HF_ENDPOINT` value for this Hub.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_access(&self, access: Access) {
        *self.state.access.lock().expect("access") = access;
    }

    /// The next download of `path` that reaches byte `bytes` stops there (the connection is
    /// dropped).
    pub fn cut_once(&self, path: &str, bytes: u64) {
        self.state
            .faults
            .lock()
            .expect("faults")
            .cut_once
            .insert(path.to_string(), bytes);
    }

    /// How `Range` requests are answered from now on.
    pub fn set_ranges(&self, ranges: Ranges) {
        self.state.faults.lock().expect("faults").ranges = ranges;
    }

    /// From now on each file body holds its first bytes until `bodies` bodies have been in
    /// flight at once, for at most `send::RENDEZVOUS_LIMIT`. A test that asserts downloads
    /// overlap would otherwise depend on the machine's speed: on a loaded runner one 72 MiB
    /// body can finish before the client's next request is even sent. A client that
    /// downloads one body at a time still never overlaps (it waits the limit out, then
    /// `max_in_flight` stays 1), so the assertion keeps its teeth.
    pub fn rendezvous(&self, bodies: usize) {
        self.state.faults.lock().expect("faults").rendezvous = Some(bodies);
    }

    /// File bytes sent so far, counted as they go out (a cut download counts what it sent).
    pub fn sent_bytes(&self) -> u64 {
        self.state.sent.load(Ordering::SeqCst)
    }

    /// The most file bodies that were being sent at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// `path` is served with one byte changed (its listing stays right).
    pub fn corrupt(&self, path: &str) {
        self.state
            .faults
            .lock()
            .expect("faults")
            .corrupt
            .insert(path.to_string());
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("seen").clone()
    }

    pub fn clear_seen(&self) {
        self.state.seen.lock().expect("seen").clear();
    }

    /// File bytes sent so far (Hub and CDN).
    pub fn body_bytes(&self) -> u64 {
        self.seen().iter().map(|s| s.body_bytes).sum()
    }

    /// Downloads of file contents so far (GETs of the resolve route or the CDN that sent data).
    pub fn downloads(&self) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.method == "GET" && s.body_bytes > 0)
            .count()
    }
}

/// Binds the Hub and its CDN, reports their addresses, and serves until `stopped`.
async fn serve(
    state: Arc<State>,
    addrs: std::sync::mpsc::Sender<(SocketAddr, SocketAddr)>,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let hub = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let cdn = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let pair = (
        hub.local_addr().expect("addr"),
        cdn.local_addr().expect("addr"),
    );
    *state.cdn.lock().expect("cdn") = Some(pair.1);
    for (listener, is_cdn) in [(hub, false), (cdn, true)] {
        let state = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(&state, req, is_cdn).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    let _ = addrs.send(pair);
    let _ = stopped.await;
}

fn log(state: &State, req: &Request<Incoming>, cdn: bool, body_bytes: u64) {
    let range_from = req
        .headers()
        .get(http::header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split('-').next())
        .and_then(|v| v.parse().ok());
    state.seen.lock().expect("seen").push(Seen {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        range_from,
        authorization: req.headers().contains_key(http::header::AUTHORIZATION),
        body_bytes,
        cdn,
    });
}

/// 401 / 403 for a gated Hub, by the request's token.
fn denied(state: &State, req: &Request<Incoming>) -> Option<Response<Body>> {
    let Access::Gated(token) = state.access.lock().expect("access").clone() else {
        return None;
    };
    let given = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match given {
        None => Some(with_error(
            StatusCode::UNAUTHORIZED,
            "GatedRepo",
            "Access to this model is restricted",
        )),
        Some(v) if v == format!("Bearer {token}") => None,
        Some(_) => Some(with_error(
            StatusCode::FORBIDDEN,
            "GatedRepo",
            "Access to this model is restricted",
        )),
    }
}

async fn handle(state: &Arc<State>, req: Request<Incoming>, cdn: bool) -> Response<Body> {
    let path = req.uri().path().to_string();
    if cdn {
        return serve_cdn(state, req, &path).await;
    }
    if let Some(r) = denied(state, &req) {
        log(state, &req, false, 0);
        return r;
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // /api/models/ORG/REPO/revision/REV
    if let ["api", "models", org, repo, "revision", rev] = parts.as_slice() {
        log(state, &req, false, 0);
        let name = format!("{org}/{repo}");
        return match revision(&state.root, &state.hashes, &name, rev) {
            None => with_error(
                StatusCode::NOT_FOUND,
                "RepoNotFound",
                "Repository not found",
            ),
            Some(Err(())) => {
                with_error(StatusCode::NOT_FOUND, "RevisionNotFound", "Invalid rev id")
            }
            Some(Ok(r)) => full(StatusCode::OK, r.listing_json(&name)),
        };
    }
    // /ORG/REPO/resolve/REV/PATH...
    if let [org, repo, "resolve", rev, rest @ ..] = parts.as_slice() {
        let name = format!("{org}/{repo}");
        let file_path = rest.join("/");
        let r = match revision(&state.root, &state.hashes, &name, rev) {
            None => {
                log(state, &req, false, 0);
                return with_error(
                    StatusCode::NOT_FOUND,
                    "RepoNotFound",
                    "Repository not found",
                );
            }
            Some(Err(())) => {
                log(state, &req, false, 0);
                return with_error(StatusCode::NOT_FOUND, "RevisionNotFound", "Invalid rev id");
            }
            Some(Ok(r)) => r,
        };
        let Some(file) = r.file(&file_path).cloned() else {
            log(state, &req, false, 0);
            return with_error(StatusCode::NOT_FOUND, "EntryNotFound", "Entry not found");
        };
        let commit = HeaderValue::from_str(&r.commit).expect("header");
        if file.lfs {
            log(state, &req, false, 0);
            let cdn = state.cdn.lock().expect("cdn").expect("cdn address");
            let mut resp = full(StatusCode::FOUND, "");
            let h = resp.headers_mut();
            h.insert(
                "location",
                HeaderValue::from_str(&format!("http://{cdn}/lfs/{}", file.sha256))
                    .expect("header"),
            );
            h.insert("x-repo-commit", commit);
            h.insert(
                "x-linked-etag",
                HeaderValue::from_str(&format!("\"{}\"", file.sha256)).expect("header"),
            );
            h.insert("x-linked-size", HeaderValue::from(file.size));
            h.insert(
                "etag",
                HeaderValue::from_str(&format!("\"{}\"", file.git_sha1)).expect("header"),
            );
            return resp;
        }
        let mut resp = send_file(state, &req, &file, false).await;
        resp.headers_mut().insert("x-repo-commit", commit);
        resp.headers_mut().insert(
            "etag",
            HeaderValue::from_str(&format!("\"{}\"", file.git_sha1)).expect("header"),
        );
        return resp;
    }
    log(state, &req, false, 0);
    full(StatusCode::NOT_FOUND, "not found")
}

/// The CDN: `/lfs/SHA256` of any file of any repository.
async fn serve_cdn(state: &Arc<State>, req: Request<Incoming>, path: &str) -> Response<Body> {
    let sha = path.trim_start_matches("/lfs/");
    let mut found = None;
    if let Ok(orgs) = std::fs::read_dir(&state.root) {
        'outer: for org in orgs.flatten() {
            for repo in std::fs::read_dir(org.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = format!(
                    "{}/{}",
                    org.file_name().to_string_lossy(),
                    repo.file_name().to_string_lossy()
                );
                let (repo_name, rev) = name.split_once('@').unwrap_or((&name, "main"));
                if let Some(Ok(r)) = revision(&state.root, &state.hashes, repo_name, rev)
                    && let Some(f) = r.files.iter().find(|f| f.sha256 == sha)
                {
                    found = Some(f.clone());
                    break 'outer;
                }
            }
        }
    }
    match found {
        Some(file) => send_file(state, &req, &file, true).await,
        None => {
            log(state, &req, true, 0);
            full(StatusCode::NOT_FOUND, "no such object")
        }
    }
}
