//! The test Hub's file bodies: read from disk a chunk at a time (a 1 GiB file over four
//! connections never sits in memory), the asked `Range` answered with 206 and its
//! `Content-Range`, and the faults applied: a cut at a byte, a changed byte, a server that
//! ignores ranges, one whose `Content-Length` is a byte short of its `Content-Range`, one
//! that never sends a range's body.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};

use super::repo::FileInfo;
use super::{Body, State, full, log};

/// Bytes read from disk and sent as one frame.
const CHUNK_BYTES: u64 = 1 << 20;

/// The longest a body holds its first bytes waiting for the rendezvous.
pub(super) const RENDEZVOUS_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits until `bodies` bodies have been in flight at once, or the limit passes.
async fn rendezvous(state: &State, bodies: usize) {
    let deadline = tokio::time::Instant::now() + RENDEZVOUS_LIMIT;
    while state.max_in_flight.load(Ordering::SeqCst) < bodies
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// How the test Hub answers `Range` requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ranges {
    /// 206 with exactly the asked bytes.
    #[default]
    Honest,
    /// 200 with the whole file, as a server without range support does.
    Ignored,
    /// 206 whose `Content-Length` (and body) is one byte short of its `Content-Range`.
    ShortLength,
    /// 206 with the right headers, then the connection dropped before any byte of the body.
    EmptyBody,
}

/// `bytes=A-` or `bytes=A-B` (B inclusive) of a request.
fn asked_range(req: &Request<Incoming>) -> Option<(u64, Option<u64>)> {
    let spec = req
        .headers()
        .get(http::header::RANGE)?
        .to_str()
        .ok()?
        .strip_prefix("bytes=")?;
    let (from, to) = spec.split_once('-')?;
    Some((from.parse().ok()?, to.parse().ok()))
}

/// Counts a body in flight while it lives.
struct InFlight(Arc<State>);

impl InFlight {
    fn start(state: &Arc<State>) -> Self {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A file's bytes (the asked range of them), with the faults applied.
pub(super) async fn send_file(
    state: &Arc<State>,
    req: &Request<Incoming>,
    file: &FileInfo,
    cdn: bool,
) -> Response<Body> {
    let is_head = req.method() == http::Method::HEAD;
    let (mode, meet) = {
        let faults = state.faults.lock().expect("faults");
        (faults.ranges, faults.rendezvous)
    };
    let range = asked_range(req).filter(|_| mode != Ranges::Ignored);
    let (from, to) = match range {
        Some((from, to)) => (
            from,
            to.unwrap_or(u64::MAX).min(file.size.saturating_sub(1)),
        ),
        None => (0, file.size.saturating_sub(1)),
    };
    if range.is_some() && (from >= file.size || to < from) && !(from == 0 && file.size == 0) {
        log(state, req, cdn, 0);
        return full(StatusCode::RANGE_NOT_SATISFIABLE, "");
    }
    let length = if file.size == 0 { 0 } else { to + 1 - from };
    let body_len = match (mode, range) {
        (Ranges::ShortLength, Some(_)) => length - 1,
        _ => length,
    };
    let body_end = from + body_len;
    let (cut, corrupt) = {
        let mut faults = state.faults.lock().expect("faults");
        let cut = match faults.cut_once.get(&file.path) {
            Some(&c) if !is_head && from <= c && c < body_end => faults.cut_once.remove(&file.path),
            _ => None,
        };
        (cut, faults.corrupt.contains(&file.path))
    };
    let cut = match (mode, range) {
        (Ranges::EmptyBody, Some(_)) => Some(from),
        _ => cut,
    };
    let stop = cut.unwrap_or(body_end);
    log(state, req, cdn, if is_head { 0 } else { stop - from });
    let body: Body = if is_head {
        Full::new(Bytes::new())
            .map_err(|never: Infallible| match never {})
            .boxed()
    } else {
        let mut disk = std::fs::File::open(&file.disk).expect("open a served file");
        disk.seek(SeekFrom::Start(from))
            .expect("seek a served file");
        let flip = corrupt.then_some(file.size / 2);
        let chunks = futures::stream::unfold(
            (disk, from, InFlight::start(state)),
            move |(mut disk, at, in_flight)| async move {
                if at >= stop {
                    return None;
                }
                if let Some(bodies) = meet.filter(|_| at == from) {
                    rendezvous(&in_flight.0, bodies).await;
                }
                let n = (stop - at).min(CHUNK_BYTES);
                let mut buf = vec![0u8; n as usize];
                if let Err(e) = disk.read_exact(&mut buf) {
                    return Some((Err(e), (disk, stop, in_flight)));
                }
                if let Some(mid) = flip.filter(|m| (at..at + n).contains(m)) {
                    buf[(mid - at) as usize] ^= 0x5a;
                }
                in_flight.0.sent.fetch_add(n, Ordering::SeqCst);
                Some((Ok(Frame::data(Bytes::from(buf))), (disk, at + n, in_flight)))
            },
        );
        // A cut: the bytes before it, then (once they are on the wire) an error, so hyper
        // drops the connection mid-body.
        let cut_off = futures::stream::iter(cut).then(|_| async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            Err(std::io::Error::other("cut by the test hub"))
        });
        BodyExt::boxed(StreamBody::new(chunks.chain(cut_off)))
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = if range.is_some() {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let h = resp.headers_mut();
    h.insert("content-length", HeaderValue::from(body_len));
    h.insert("accept-ranges", HeaderValue::from_static("bytes"));
    if range.is_some() {
        h.insert(
            "content-range",
            HeaderValue::from_str(&format!("bytes {from}-{to}/{}", file.size)).expect("header"),
        );
    }
    resp
}
