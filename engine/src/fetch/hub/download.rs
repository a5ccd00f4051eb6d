//! One file of the Hub into the cache: locked against other processes, resumed from what an
//! earlier attempt left in `blobs/NAME.incomplete`, retried on transport failures from where
//! it stopped, verified (size and SHA-256, or the Git blob id for small files) before it is
//! renamed into `blobs/`. Nothing unverified is ever visible under its final name. Large files
//! go over several ranged connections (`parts`); this is the one-stream path and the shared
//! steps around both.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};

use super::api::Hash;
use super::cache::{RepoCache, create_parent};
use super::http::{BODY_IDLE_TIMEOUT, Http};
use super::parts::{self, PARTED_MIN_BYTES};
use super::status_error;
use crate::fetch::progress::Progress;
use crate::fetch::{Error, Result};

/// Attempts without progress before a download gives up.
pub(super) const MAX_ATTEMPTS: u32 = 5;
/// How often a download waiting for another process's lock on its file looks again.
const LOCK_POLL: Duration = Duration::from_millis(200);

/// What to download and how to check it.
pub struct BlobRequest {
    /// `hf://org/repo@rev`, for messages.
    pub model: String,
    /// The file's path in the repository, for messages and progress.
    pub path: String,
    pub url: String,
    pub hash: Hash,
    pub size: Option<u64>,
}

pub(super) fn io_err(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| {
        if source.kind() == std::io::ErrorKind::StorageFull {
            return Error::DiskFull {
                what,
                detail: source.to_string(),
            };
        }
        Error::Io { what, source }
    }
}

/// Makes sure blob `req.hash` is in `repo`'s cache, downloading what is missing (over up to
/// `connections` ranged connections when the file is large); returns the bytes downloaded.
pub async fn ensure_blob(
    http: &Http,
    repo: &RepoCache,
    req: &BlobRequest,
    connections: usize,
    progress: &Progress,
) -> Result<u64> {
    let name = req.hash.blob_name();
    let (blob, partial, lock_path) = (repo.blob(name), repo.incomplete(name), repo.lock(name));
    for p in [&blob, &lock_path] {
        create_parent(p).map_err(io_err(format!(
            "creating the cache folder of {}",
            p.display()
        )))?;
    }
    // One downloader per blob across processes (replicas sharing a cache volume, `up`).
    let lock = std::fs::File::create(&lock_path)
        .map_err(io_err(format!("creating {}", lock_path.display())))?;
    wait_for_lock(&lock, &lock_path).await?;
    if blob.is_file() {
        return Ok(0); // another process finished it while we waited
    }
    let streamed = partial.metadata().is_ok_and(|m| m.len() > 0);
    if let Some(size) = req.size.filter(|&s| s >= PARTED_MIN_BYTES)
        && connections > 1
        // What one stream left is resumed as one stream (it may be `huggingface_hub`'s).
        && !streamed
        && let Some(fetched) = parts::download(http, repo, req, size, connections, progress).await?
    {
        return Ok(fetched);
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(&partial)
        .map_err(io_err(format!("opening {}", partial.display())))?;
    let mut have = file
        .metadata()
        .map_err(io_err(format!("reading {}", partial.display())))?
        .len();
    if req.size.is_some_and(|size| have > size) {
        file.set_len(0)
            .map_err(io_err(format!("truncating {}", partial.display())))?;
        have = 0;
    }
    let mut sha = Sha256::new();
    if have > 0 {
        hash_prefix(&partial, have, &mut sha)?;
        progress.add(have, &req.path);
    }
    let mut failures = 0;
    let mut fetched = 0;
    loop {
        let before = have;
        let attempt = fetch_rest(http, req, &mut file, &mut have, &mut sha, progress).await;
        fetched += have - before;
        match attempt {
            Ok(None) => break,
            Ok(Some(why)) => {
                // Cut after some progress: resume at once, with a fresh count of failures.
                failures = 0;
                tracing::warn!(file = %req.path, bytes = have, "download interrupted ({why}); resuming");
            }
            Err(Retry::Restart) => {
                progress.rewind(have);
                file.set_len(0)
                    .map_err(io_err(format!("truncating {}", partial.display())))?;
                have = 0;
                sha = Sha256::new();
            }
            Err(Retry::Transient(why)) => {
                failures += 1;
                if failures >= MAX_ATTEMPTS {
                    return Err(Error::Hub {
                        model: req.model.clone(),
                        message: format!("downloading {}: {why} ({failures} attempts)", req.path),
                    });
                }
                let wait = Duration::from_millis(250 << failures);
                tracing::warn!(file = %req.path, bytes = have, "download interrupted ({why}); resuming in {wait:?}");
                tokio::time::sleep(wait).await;
            }
            Err(Retry::Fatal(e)) => return Err(e),
        }
    }
    file.flush()
        .map_err(io_err(format!("writing {}", partial.display())))?;
    verify(req, &partial, have, sha)?;
    // Data on disk before the rename makes it visible: a crash never exposes a short file.
    file.sync_all()
        .map_err(io_err(format!("syncing {}", partial.display())))?;
    std::fs::rename(&partial, &blob).map_err(io_err(format!(
        "renaming {} into the cache",
        partial.display()
    )))?;
    Ok(fetched)
}

/// Takes the per-file lock without blocking the thread: every download of this process runs
/// on it, and two processes that each hold one file's lock and block on the other's would
/// wait forever.
async fn wait_for_lock(lock: &std::fs::File, path: &Path) -> Result<()> {
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => tokio::time::sleep(LOCK_POLL).await,
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(io_err(format!("locking {}", path.display()))(e));
            }
        }
    }
}

/// Why an attempt stopped.
enum Retry {
    /// A network failure or a 5xx: try again from where it stopped.
    Transient(String),
    /// The server ignored the range: start the file again.
    Restart,
    /// An answer that retrying cannot change.
    Fatal(Error),
}

/// One request for the bytes from `have` on: `Ok(None)` when the body ended normally,
/// `Ok(Some(why))` when it was cut after some bytes arrived.
async fn fetch_rest(
    http: &Http,
    req: &BlobRequest,
    file: &mut std::fs::File,
    have: &mut u64,
    sha: &mut Sha256,
    progress: &Progress,
) -> Result<Option<String>, Retry> {
    if req.size.is_some_and(|s| *have == s) {
        return Ok(None);
    }
    let reply = http
        .send(Method::GET, &req.url, Some((*have, None)), true)
        .await
        .map_err(Retry::Transient)?;
    match reply.status {
        StatusCode::OK if *have > 0 => return Err(Retry::Restart),
        StatusCode::OK => {}
        StatusCode::PARTIAL_CONTENT => {
            let start = reply
                .headers
                .get(http::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("bytes "))
                .and_then(|v| v.split('-').next())
                .and_then(|v| v.parse::<u64>().ok());
            if start != Some(*have) {
                return Err(Retry::Restart);
            }
        }
        StatusCode::RANGE_NOT_SATISFIABLE => return Err(Retry::Restart),
        s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
            return Err(Retry::Transient(format!("the server answered {s}")));
        }
        s => {
            let what = format!("file {} in {}", &req.path, req.model);
            return Err(Retry::Fatal(status_error(
                &req.model,
                &what,
                s,
                &reply.hub_headers,
                http.has_token(),
            )));
        }
    }
    let mut body = reply.body;
    let start = *have;
    let cut = |have: u64, why: String| {
        if have > start {
            Ok(Some(why))
        } else {
            Err(Retry::Transient(why))
        }
    };
    loop {
        let frame = match tokio::time::timeout(BODY_IDLE_TIMEOUT, body.frame()).await {
            Err(_) => return cut(*have, format!("no data for {BODY_IDLE_TIMEOUT:?}")),
            Ok(None) => match req.size {
                Some(size) if *have < size => {
                    return cut(
                        *have,
                        format!("the response ended at byte {} of {size}", *have),
                    );
                }
                _ => return Ok(None),
            },
            Ok(Some(Err(e))) => {
                return cut(
                    *have,
                    format!("connection lost after {} bytes: {e}", *have - start),
                );
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if req.size.is_some_and(|s| *have + data.len() as u64 > s) {
            return Err(Retry::Fatal(Error::Integrity {
                file: req.path.clone(),
                model: req.model.clone(),
                detail: format!(
                    "the server sent more than the {} bytes the Hub lists",
                    req.size.unwrap_or(0)
                ),
            }));
        }
        file.write_all(&data)
            .map_err(|e| Retry::Fatal(io_err(format!("writing {}", req.path))(e)))?;
        sha.update(&data);
        *have += data.len() as u64;
        progress.add(data.len() as u64, &req.path);
    }
}

/// Feeds the first `len` bytes of `path` into `sha` (resuming a download, checking a file
/// that arrived in parts).
pub(super) fn hash_prefix(path: &Path, len: u64, sha: &mut Sha256) -> Result<()> {
    let mut f = std::fs::File::open(path).map_err(io_err(format!("reading {}", path.display())))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = f
            .read(&mut buf[..left.min(1 << 20) as usize])
            .map_err(io_err(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(())
}

/// Checks size and hash; a file that fails is removed so the next attempt starts clean.
pub(super) fn verify(req: &BlobRequest, partial: &Path, have: u64, sha: Sha256) -> Result<()> {
    let fail = |detail: String| {
        let _ = std::fs::remove_file(partial);
        Err(Error::Integrity {
            file: req.path.clone(),
            model: req.model.clone(),
            detail: format!("{detail}; the download was discarded"),
        })
    };
    if let Some(size) = req.size.filter(|&s| s != have) {
        return fail(format!("got {have} bytes, the Hub lists {size}"));
    }
    let actual = match &req.hash {
        Hash::Sha256(_) => hex(&sha.finalize()),
        Hash::GitSha1(_) => git_blob_sha1(partial, have)?,
    };
    if actual != req.hash.blob_name() {
        let kind = match req.hash {
            Hash::Sha256(_) => "SHA-256",
            Hash::GitSha1(_) => "Git blob id",
        };
        return fail(format!(
            "{kind} is {actual}, the Hub lists {}",
            req.hash.blob_name()
        ));
    }
    Ok(())
}

/// Git's blob id of a file: SHA-1 of `blob {size}\0` and the content.
fn git_blob_sha1(path: &Path, size: u64) -> Result<String> {
    use sha1::Digest as _;
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {size}\0").as_bytes());
    let mut f = std::fs::File::open(path).map_err(io_err(format!("reading {}", path.display())))?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io_err(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
