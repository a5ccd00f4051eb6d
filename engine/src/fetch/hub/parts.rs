//! One large file over several ranged connections: the file is cut into parts, up to
//! `connections` of them are fetched at once (`Range: bytes=A-B`, each answer checked against
//! what was asked), each written at its offset into `blobs/NAME.parted` (the whole file's
//! length from the start). A ledger beside it (`NAME.parted.done`) lists the finished parts; it
//! is rewritten only after a part's data is synced, so after a crash or a cut it never claims
//! bytes that are not on disk, and the next run fetches only the parts it does not list. The
//! whole file is hashed before it is renamed into `blobs/`, as a one-stream download is.

use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};

use super::cache::RepoCache;
use super::download::{BlobRequest, MAX_ATTEMPTS, hash_prefix, io_err, verify};
use super::http::{BODY_IDLE_TIMEOUT, Http};
use super::status_error;
use crate::fetch::progress::Progress;
use crate::fetch::{Error, Result};

/// Files from this size on are fetched in parts (smaller ones gain little from it).
pub const PARTED_MIN_BYTES: u64 = 64 << 20;
/// Part sizes: about four parts per connection, within these bounds (a cut loses at most one
/// part per connection; each part costs a request and a sync).
const MIN_PART_BYTES: u64 = 8 << 20;
const MAX_PART_BYTES: u64 = 32 << 20;
/// The ledger's first line names its format; anything else is not trusted.
const LEDGER_MAGIC: &str = "tokenscale-parts v1";

/// The parts of one file and which of them are on disk. Pure: no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    size: u64,
    part_bytes: u64,
    done: Vec<bool>,
}

impl Ledger {
    /// A plan for a file of `size` bytes over `connections`, nothing done.
    pub fn fresh(size: u64, connections: usize) -> Self {
        let part_bytes =
            (size / (4 * connections.max(1) as u64)).clamp(MIN_PART_BYTES, MAX_PART_BYTES);
        Self {
            size,
            part_bytes,
            done: vec![false; size.div_ceil(part_bytes) as usize],
        }
    }

    /// The ledger `text` records, if it is one for a file of `size` bytes (a ledger of another
    /// plan or an unreadable one is `None`: the download starts again).
    pub fn parse(text: &str, size: u64) -> Option<Self> {
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next()?.split(' ').collect();
        let [magic_a, magic_b, file_size, part_bytes] = header.as_slice() else {
            return None;
        };
        if format!("{magic_a} {magic_b}") != LEDGER_MAGIC || file_size.parse::<u64>().ok()? != size
        {
            return None;
        }
        let part_bytes: u64 = part_bytes.parse().ok().filter(|&p| p > 0)?;
        let mut ledger = Self {
            size,
            part_bytes,
            done: vec![false; size.div_ceil(part_bytes) as usize],
        };
        for line in lines {
            let index: usize = line.parse().ok()?;
            *ledger.done.get_mut(index)? = true;
        }
        Some(ledger)
    }

    /// The text [`Self::parse`] reads back.
    pub fn render(&self) -> String {
        let mut text = format!("{LEDGER_MAGIC} {} {}\n", self.size, self.part_bytes);
        for (i, _) in self.done.iter().enumerate().filter(|(_, d)| **d) {
            text.push_str(&format!("{i}\n"));
        }
        text
    }

    /// First and last byte (inclusive) of part `index`.
    pub fn range(&self, index: usize) -> (u64, u64) {
        let first = index as u64 * self.part_bytes;
        (first, (first + self.part_bytes).min(self.size) - 1)
    }

    /// Parts not on disk yet, in file order.
    pub fn missing(&self) -> Vec<usize> {
        (0..self.done.len()).filter(|&i| !self.done[i]).collect()
    }

    /// Bytes of the finished parts.
    pub fn done_bytes(&self) -> u64 {
        (0..self.done.len())
            .filter(|&i| self.done[i])
            .map(|i| self.range(i))
            .map(|(first, last)| last + 1 - first)
            .sum()
    }
}

/// Downloads `req` (of `size` bytes) over up to `connections` ranged connections and renames it
/// into the cache; returns the bytes downloaded, or `None` when the server does not answer
/// ranges (the caller then fetches it as one stream; nothing of this attempt is kept).
pub async fn download(
    http: &Http,
    repo: &RepoCache,
    req: &BlobRequest,
    size: u64,
    connections: usize,
    progress: &Progress,
) -> Result<Option<u64>> {
    let name = req.hash.blob_name();
    let (data, ledger_path) = (repo.parted(name), repo.parted_ledger(name));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&data)
        .map_err(io_err(format!("opening {}", data.display())))?;
    let on_disk = file.metadata().is_ok_and(|m| m.len() == size);
    let ledger = std::fs::read_to_string(&ledger_path)
        .ok()
        .and_then(|text| Ledger::parse(&text, size))
        .filter(|_| on_disk);
    let ledger = match ledger {
        Some(l) => l,
        None => {
            // A new plan: no part of an older one may be trusted.
            let fresh = Ledger::fresh(size, connections);
            write_ledger(&ledger_path, &fresh)?;
            file.set_len(0)
                .and_then(|()| file.set_len(size))
                .map_err(io_err(format!("preallocating {}", data.display())))?;
            fresh
        }
    };
    progress.add(ledger.done_bytes(), &req.path);
    let shared = Shared {
        http,
        req,
        size,
        file: &file,
        ledger_path: &ledger_path,
        queue: Mutex::new(ledger.missing().into()),
        ledger: Mutex::new(ledger),
        ranges_seen: AtomicBool::new(false),
        progress,
    };
    let workers = (0..connections).map(|_| shared.worker());
    let fetched: u64 = match futures::future::try_join_all(workers).await {
        Ok(counts) => counts.into_iter().sum(),
        Err(PartError::NoRanges) => {
            let kept = shared.lock_ledger().done_bytes();
            progress.rewind(kept);
            drop(file);
            remove(&[&data, &ledger_path]);
            return Ok(None);
        }
        Err(PartError::Fatal(e)) => return Err(e),
    };
    // Every part is synced; hash the whole file off the runtime's thread (other files go on).
    let sha = {
        let data = data.clone();
        tokio::task::spawn_blocking(move || {
            let mut sha = Sha256::new();
            hash_prefix(&data, size, &mut sha).map(|()| sha)
        })
        .await
        .map_err(|e| Error::Hub {
            model: req.model.clone(),
            message: format!("hashing {}: {e}", req.path),
        })??
    };
    if let Err(e) = verify(req, &data, size, sha) {
        remove(&[&ledger_path]);
        return Err(e);
    }
    let blob = repo.blob(name);
    std::fs::rename(&data, &blob).map_err(io_err(format!(
        "renaming {} into the cache",
        data.display()
    )))?;
    remove(&[&ledger_path]);
    Ok(Some(fetched))
}

/// Bytes of blob `name` (of `size` bytes) that an earlier parted download left on disk.
pub fn kept_bytes(repo: &RepoCache, name: &str, size: u64) -> u64 {
    std::fs::read_to_string(repo.parted_ledger(name))
        .ok()
        .and_then(|text| Ledger::parse(&text, size))
        .map_or(0, |l| l.done_bytes())
}

fn remove(paths: &[&Path]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}

/// Replaces the ledger atomically (a crash leaves the old one or the new one, both true).
fn write_ledger(path: &Path, ledger: &Ledger) -> Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, ledger.render().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(io_err(format!("writing {}", path.display())))
}

/// Why fetching parts stopped.
enum PartError {
    /// The server answered a range request with the whole file before answering any range.
    NoRanges,
    Fatal(Error),
}

/// What the workers of one file share.
struct Shared<'a> {
    http: &'a Http,
    req: &'a BlobRequest,
    size: u64,
    file: &'a std::fs::File,
    ledger_path: &'a Path,
    /// Parts no worker has taken yet.
    queue: Mutex<VecDeque<usize>>,
    ledger: Mutex<Ledger>,
    /// Whether the server has answered a range: after that a whole-file answer is an error.
    ranges_seen: AtomicBool,
    progress: &'a Progress,
}

impl Shared<'_> {
    fn lock_ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_part(&self) -> Option<usize> {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    /// One connection: takes parts until none are left; returns the bytes it downloaded.
    async fn worker(&self) -> Result<u64, PartError> {
        let mut fetched = 0;
        while let Some(index) = self.next_part() {
            let (first, last) = self.lock_ledger().range(index);
            fetched += self.fetch_part(first, last).await?;
            // The data is on disk before the ledger says so.
            self.file
                .sync_data()
                .map_err(|e| PartError::Fatal(io_err(format!("syncing {}", self.req.path))(e)))?;
            // Under the lock: one writer of the ledger at a time.
            let mut ledger = self.lock_ledger();
            ledger.done[index] = true;
            write_ledger(self.ledger_path, &ledger).map_err(PartError::Fatal)?;
        }
        Ok(fetched)
    }

    /// Bytes `first..=last` into the file, resuming within the part after a cut; returns the
    /// bytes downloaded.
    async fn fetch_part(&self, first: u64, last: u64) -> Result<u64, PartError> {
        let mut at = first;
        let mut failures = 0;
        while at <= last {
            let before = at;
            let why = match self.request(at, last).await {
                Ok(body) => match self.read_into(body, &mut at, last).await? {
                    None => continue,
                    Some(why) => why,
                },
                Err(Attempt::Transient(why)) => why,
                Err(Attempt::Stop(e)) => return Err(e),
            };
            failures = if at > before { 0 } else { failures + 1 };
            if failures >= MAX_ATTEMPTS {
                return Err(PartError::Fatal(self.hub_error(format!(
                    "bytes {at}-{last}: {why} ({failures} attempts)"
                ))));
            }
            let wait = Duration::from_millis(if failures == 0 { 0 } else { 250 << failures });
            tracing::warn!(file = %self.req.path, at, last, "part interrupted ({why}); resuming in {wait:?}");
            tokio::time::sleep(wait).await;
        }
        Ok(last + 1 - first)
    }

    fn hub_error(&self, message: String) -> Error {
        Error::Hub {
            model: self.req.model.clone(),
            message: format!("downloading {}: {message}", self.req.path),
        }
    }

    /// Asks for bytes `at..=last` and checks that the answer is exactly those bytes.
    async fn request(&self, at: u64, last: u64) -> Result<hyper::body::Incoming, Attempt> {
        let reply = self
            .http
            .send(Method::GET, &self.req.url, Some((at, Some(last))), true)
            .await
            .map_err(Attempt::Transient)?;
        let header = |name: http::header::HeaderName| {
            reply
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let asked = format!("bytes {at}-{last}/{}", self.size);
        match reply.status {
            StatusCode::PARTIAL_CONTENT => {
                self.ranges_seen.store(true, Ordering::Relaxed);
                let range = header(http::header::CONTENT_RANGE);
                let length = header(http::header::CONTENT_LENGTH);
                if range.as_deref() != Some(asked.as_str()) {
                    let got = range.unwrap_or_else(|| "no Content-Range".into());
                    return Err(Attempt::Stop(PartError::Fatal(self.hub_error(format!(
                        "the server answered {got} to a request for {asked}"
                    )))));
                }
                if let Some(length) = length.filter(|l| *l != (last + 1 - at).to_string()) {
                    return Err(Attempt::Stop(PartError::Fatal(self.hub_error(format!(
                        "the server's Content-Length {length} does not match its Content-Range \
                         {asked}"
                    )))));
                }
                Ok(reply.body)
            }
            StatusCode::OK if !self.ranges_seen.load(Ordering::Relaxed) => {
                Err(Attempt::Stop(PartError::NoRanges))
            }
            StatusCode::OK => Err(Attempt::Stop(PartError::Fatal(self.hub_error(format!(
                "the server answered 200 (the whole file) to a request for {asked}, after \
                 answering ranges before"
            ))))),
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
                Err(Attempt::Transient(format!("the server answered {s}")))
            }
            s => {
                let what = format!("file {} in {}", self.req.path, self.req.model);
                Err(Attempt::Stop(PartError::Fatal(status_error(
                    &self.req.model,
                    &what,
                    s,
                    &reply.hub_headers,
                    self.http.has_token(),
                ))))
            }
        }
    }

    /// Writes a part's body at its offsets: `Ok(None)` when it ended at `last`, `Ok(Some(why))`
    /// when it was cut before.
    async fn read_into(
        &self,
        mut body: hyper::body::Incoming,
        at: &mut u64,
        last: u64,
    ) -> Result<Option<String>, PartError> {
        loop {
            let frame = match tokio::time::timeout(BODY_IDLE_TIMEOUT, body.frame()).await {
                Err(_) => return Ok(Some(format!("no data for {BODY_IDLE_TIMEOUT:?}"))),
                Ok(None) if *at > last => return Ok(None),
                Ok(None) => return Ok(Some(format!("the response ended at byte {}", *at))),
                Ok(Some(Err(e))) => return Ok(Some(format!("connection lost: {e}"))),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if *at + data.len() as u64 > last + 1 {
                return Err(PartError::Fatal(self.hub_error(format!(
                    "the server sent more than the bytes up to {last} it was asked for"
                ))));
            }
            self.file
                .write_all_at(&data, *at)
                .map_err(|e| PartError::Fatal(io_err(format!("writing {}", self.req.path))(e)))?;
            *at += data.len() as u64;
            self.progress.add(data.len() as u64, &self.req.path);
        }
    }
}

/// Why one request of a part did not deliver.
enum Attempt {
    /// Worth another try (network, 5xx).
    Transient(String),
    Stop(PartError),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_planned_in_parts_that_cover_it_exactly() {
        let size = (1 << 30) + 5;
        let l = Ledger::fresh(size, 4);
        assert_eq!(l.part_bytes, 32 << 20, "at most 32 MiB a part");
        assert_eq!(l.done.len(), 33);
        assert_eq!(l.range(0), (0, (32 << 20) - 1));
        assert_eq!(l.range(32), (1 << 30, size - 1));
        let mid = Ledger::fresh(256 << 20, 4);
        assert_eq!(mid.part_bytes, 16 << 20, "about four parts a connection");
        let small = Ledger::fresh(70 << 20, 8);
        assert_eq!(small.part_bytes, 8 << 20, "at least 8 MiB a part");
        assert_eq!(small.missing().len(), 9);
    }

    #[test]
    fn the_ledger_reads_back_what_it_wrote_and_nothing_else() {
        let size = 300 << 20;
        let mut l = Ledger::fresh(size, 4);
        l.done[1] = true;
        l.done[4] = true;
        let text = l.render();
        assert_eq!(Ledger::parse(&text, size), Some(l.clone()));
        assert_eq!(l.done_bytes(), 2 * l.part_bytes);
        assert_eq!(l.missing().len(), l.done.len() - 2);
        // Another file size, another format, a part out of range, a torn line: not trusted.
        assert_eq!(Ledger::parse(&text, size + 1), None);
        assert_eq!(Ledger::parse(&text.replace("v1", "v2"), size), None);
        assert_eq!(Ledger::parse(&format!("{text}99\n"), size), None);
        assert_eq!(Ledger::parse(&format!("{text}1x"), size), None);
        assert_eq!(Ledger::parse("", size), None);
    }
}
