//! `hf://ORG/REPO[@REVISION][/FILE]` sources, fetched with the Hugging Face Hub's own HTTP
//! protocol: the revision listing (`/api/models/REPO/revision/REV?blobs=true`: the commit,
//! every file's size and hash) and the resolve route (`/REPO/resolve/COMMIT/PATH`, with
//! ranges; large files redirect to a CDN). Files land in the cache layout `huggingface_hub`
//! uses (`cache`), so either finds what the other fetched.
//!
//! Written on hyper rather than the `hf-hub` crate: 0.4 verifies no checksums and cannot
//! resume a cut download, 1.0 brings a second HTTP stack (reqwest) into an engine that already
//! has hyper and rustls; what the engine needs is five requests and a cache layout.

mod api;
mod cache;
mod download;
mod http;
mod parts;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ::http::{HeaderMap, Method, StatusCode};
use futures::{StreamExt, TryStreamExt};
use http_body_util::{BodyExt, Limited};
use tokenscale_common::hub_source::HubSource;

pub use self::api::{
    Hash, RemoteFile, RepoListing, SelectError, Selection, parse_listing, select, shards_of_index,
};
pub use self::cache::{RepoCache, hf_home, hub_cache_dir};
use self::download::{BlobRequest, ensure_blob};
use self::http::Http;
use super::progress::Progress;
use super::{Error, Result};

/// The Hub's public endpoint (`HF_ENDPOINT` replaces it).
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Files downloaded at once (each over up to [`HubConfig::connections`] connections).
const FILES_IN_FLIGHT: usize = 3;
/// Largest repository listing or index file read into memory.
const MAX_METADATA_BYTES: usize = 64 << 20;
/// Connections per large file when `TOKENSCALE_HUB_CONNECTIONS` is not set.
pub const DEFAULT_CONNECTIONS: usize = 4;
/// Most connections per file a user may ask for (more only adds load on the CDN).
pub const MAX_CONNECTIONS: usize = 32;
/// The environment variable (and `pull --hub-connections`) that sets
/// [`HubConfig::connections`].
pub const CONNECTIONS_ENV: &str = "TOKENSCALE_HUB_CONNECTIONS";

/// Where and how to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubConfig {
    /// `HF_ENDPOINT`, without a trailing `/`.
    pub endpoint: String,
    /// `HF_TOKEN`, else the token file `huggingface-cli login` writes (`HF_HOME/token`).
    pub token: Option<String>,
    /// The hub cache directory (see [`hub_cache_dir`]).
    pub cache_dir: PathBuf,
    /// `HF_HUB_OFFLINE`: use the cache only.
    pub offline: bool,
    /// No progress output (tests).
    pub quiet: bool,
    /// Ranged connections per large file (`TOKENSCALE_HUB_CONNECTIONS`, default 4; 1 is one
    /// stream per file, as `huggingface_hub` downloads).
    pub connections: usize,
}

impl HubConfig {
    /// The configuration the process environment describes.
    pub fn from_env() -> Result<Self> {
        Self::with_env(&|k| std::env::var_os(k))
    }

    /// The configuration for these environment values.
    pub fn with_env(env: &dyn Fn(&str) -> Option<OsString>) -> Result<Self> {
        let var = |k: &str| {
            env(k)
                .map(|v| v.to_string_lossy().trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let cache_dir = hub_cache_dir(env).ok_or(Error::NoCacheDir)?;
        let token = var("HF_TOKEN").or_else(|| {
            let path = hf_home(env)?.join("token");
            let text = std::fs::read_to_string(path).ok()?;
            Some(text.trim().to_string()).filter(|t| !t.is_empty())
        });
        let offline = var("HF_HUB_OFFLINE")
            .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "yes" | "on"));
        let connections = match var(CONNECTIONS_ENV) {
            None => DEFAULT_CONNECTIONS,
            Some(v) => parse_connections(&v).map_err(|why| Error::BadSetting {
                name: CONNECTIONS_ENV.to_string(),
                value: v,
                why,
            })?,
        };
        Ok(Self {
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
                .trim_end_matches('/')
                .to_string(),
            token,
            cache_dir,
            offline,
            quiet: false,
            connections,
        })
    }
}

/// A connection count from the environment or the command line: 1 to [`MAX_CONNECTIONS`].
pub fn parse_connections(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n @ 1..=MAX_CONNECTIONS) => Ok(n),
        _ => Err(format!("a whole number from 1 to {MAX_CONNECTIONS}")),
    }
}

/// A fetched (or cached) source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The commit the revision resolved to.
    pub commit: String,
    /// `snapshots/COMMIT` in the cache.
    pub dir: PathBuf,
    /// What to load: the named file, or the checkpoint directory.
    pub path: PathBuf,
    /// Bytes downloaded by this fetch (0 when everything was cached).
    pub downloaded_bytes: u64,
}

/// Fetches `source` into the cache (what is there already is not downloaded again) and
/// returns where it is. Blocking: runs its own small runtime.
pub fn fetch(source: &HubSource, config: &HubConfig) -> Result<Snapshot> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            what: "starting the download runtime".into(),
            source,
        })?;
    runtime.block_on(fetch_async(source, config))
}

/// The error for an HTTP status the Hub answered about `what` (a repository, revision or
/// file of `model`).
pub(crate) fn status_error(
    model: &str,
    what: &str,
    status: StatusCode,
    headers: &HeaderMap,
    token_set: bool,
) -> Error {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let code = header("x-error-code");
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Error::HubDenied {
            model: model.to_string(),
            status: status.as_u16(),
            token_set,
        },
        StatusCode::NOT_FOUND => Error::HubNotFound {
            what: match code {
                "RepoNotFound" => format!("repository {}", model_repo(model)),
                "RevisionNotFound" => format!("revision of {model}"),
                _ => what.to_string(),
            },
        },
        _ => {
            let message = header("x-error-message");
            Error::Hub {
                model: model.to_string(),
                message: format!("{what}: the Hub answered {status} {message}")
                    .trim_end()
                    .to_string(),
            }
        }
    }
}

/// `org/repo` of `hf://org/repo@rev/...`.
fn model_repo(model: &str) -> &str {
    let rest = model.strip_prefix("hf://").unwrap_or(model);
    let end = rest
        .match_indices('/')
        .nth(1)
        .map_or(rest.len(), |(i, _)| i);
    rest[..end].split('@').next().unwrap_or(rest)
}

/// Percent-encodes one path segment.
fn encode(segment: &str) -> String {
    let mut out = String::new();
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn encode_path(path: &str) -> String {
    path.split('/').map(encode).collect::<Vec<_>>().join("/")
}

/// How fetching the listing failed.
enum ListingError {
    /// No answer (network down, DNS, timeouts): the cache may serve.
    Unreachable(String),
    Fatal(Error),
}

async fn fetch_async(source: &HubSource, config: &HubConfig) -> Result<Snapshot> {
    let model = source.to_string();
    let repo = RepoCache::new(&config.cache_dir, &source.repo);
    if config.offline {
        return cached(source, &repo).ok_or_else(|| Error::Offline {
            model: model.clone(),
            cache: repo.dir().to_path_buf(),
        });
    }
    // A commit never changes: when its snapshot is complete, the Hub has nothing to add.
    if api::is_hex(source.revision_or_main(), 40)
        && let Some(snapshot) = cached(source, &repo)
    {
        return Ok(snapshot);
    }
    let http = Http::new(&config.endpoint, config.token.clone()).map_err(|message| Error::Hub {
        model: model.clone(),
        message,
    })?;
    let listing = match fetch_listing(&http, config, source, &model).await {
        Ok(l) => l,
        Err(ListingError::Fatal(e)) => return Err(e),
        Err(ListingError::Unreachable(why)) => {
            return match cached(source, &repo) {
                Some(s) => {
                    tracing::warn!(model = %model, commit = %s.commit, "the Hub is unreachable ({why}): serving the cached snapshot");
                    Ok(s)
                }
                None => Err(Error::Hub {
                    model,
                    message: format!("the Hub is unreachable: {why}"),
                }),
            };
        }
    };
    let commit = listing.commit.clone();
    let selection =
        select(&listing, source.file.as_deref()).map_err(|e| select_error(&model, e))?;
    let fetcher = Fetcher {
        http: &http,
        config,
        repo: &repo,
        listing: &listing,
        model: &model,
    };
    let mut files: Vec<String> = Vec::new();
    let path = match selection {
        Selection::File(f) => {
            files.push(f.clone());
            repo.snapshot(&commit).join(&f)
        }
        Selection::Checkpoint {
            index,
            single,
            extras,
        } => {
            files.extend(extras);
            if let Some(index) = index {
                // The index is small and names the shards: fetch it first.
                fetcher
                    .get_files(std::slice::from_ref(&index), true)
                    .await?;
                let text =
                    std::fs::read(repo.snapshot(&commit).join(&index)).map_err(|source| {
                        Error::Io {
                            what: format!("reading {index}"),
                            source,
                        }
                    })?;
                let shards = shards_of_index(&text).map_err(|message| Error::Hub {
                    model: model.clone(),
                    message,
                })?;
                files.extend(shards);
            }
            files.extend(single);
            repo.snapshot(&commit)
        }
    };
    let downloaded_bytes = fetcher.get_files(&files, false).await?;
    if let Err(e) = repo.write_ref(source.revision_or_main(), &commit) {
        tracing::warn!("could not record the revision in the cache: {e}");
    }
    Ok(Snapshot {
        dir: repo.snapshot(&commit),
        commit,
        path,
        downloaded_bytes,
    })
}

/// The repository listing at the source's revision.
async fn fetch_listing(
    http: &Http,
    config: &HubConfig,
    source: &HubSource,
    model: &str,
) -> Result<RepoListing, ListingError> {
    let url = format!(
        "{}/api/models/{}/revision/{}?blobs=true",
        config.endpoint,
        encode_path(&source.repo),
        encode(source.revision_or_main())
    );
    let mut last = String::new();
    for attempt in 0..3u32 {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(250 << attempt)).await;
        }
        let reply = match http.send(Method::GET, &url, None, true).await {
            Ok(r) => r,
            Err(why) => {
                last = why;
                continue;
            }
        };
        if reply.status.is_server_error() || reply.status == StatusCode::TOO_MANY_REQUESTS {
            last = format!("the Hub answered {}", reply.status);
            continue;
        }
        if !reply.status.is_success() {
            let what = format!("revision {} of {}", source.revision_or_main(), source.repo);
            return Err(ListingError::Fatal(status_error(
                model,
                &what,
                reply.status,
                &reply.hub_headers,
                http.has_token(),
            )));
        }
        let body = Limited::new(reply.body, MAX_METADATA_BYTES)
            .collect()
            .await
            .map_err(|e| ListingError::Unreachable(format!("reading the repository listing: {e}")))?
            .to_bytes();
        return parse_listing(&body).map_err(|message| {
            ListingError::Fatal(Error::Hub {
                model: model.to_string(),
                message,
            })
        });
    }
    Err(ListingError::Unreachable(last))
}

/// The snapshot of `source` in the cache, if it is complete there.
fn cached(source: &HubSource, repo: &RepoCache) -> Option<Snapshot> {
    let commit = repo.cached_commit(source.revision_or_main())?;
    let dir = repo.snapshot(&commit);
    let path = match &source.file {
        Some(f) => repo.has(&commit, f).then(|| dir.join(f))?,
        None => {
            let configs = api::CONFIG_FILES.iter().all(|f| repo.has(&commit, f));
            let index = crate::model::hf::INDEX_FILE;
            let weights = if repo.has(&commit, index) {
                let text = std::fs::read(dir.join(index)).ok()?;
                shards_of_index(&text)
                    .ok()?
                    .iter()
                    .all(|s| repo.has(&commit, s))
            } else {
                repo.has(&commit, crate::model::hf::SINGLE_FILE)
            };
            (configs && weights).then(|| dir.clone())?
        }
    };
    Some(Snapshot {
        commit,
        dir,
        path,
        downloaded_bytes: 0,
    })
}

fn select_error(model: &str, e: SelectError) -> Error {
    match e {
        SelectError::FileMissing { file, ggufs } => Error::HubNotFound {
            what: format!("file {file} in {model}{}", alternatives(&ggufs)),
        },
        SelectError::ConfigMissing { file } => Error::Hub {
            model: model.to_string(),
            message: format!("the repository has no {file}, which a safetensors checkpoint needs"),
        },
        SelectError::NoWeights { ggufs } => Error::Hub {
            model: model.to_string(),
            message: format!(
                "no model.safetensors or model.safetensors.index.json at the top of the repository{}",
                match ggufs.first() {
                    Some(first) => format!(
                        "; it has GGUF files ({}): name one, e.g. {model}/{first}",
                        ggufs.join(", ")
                    ),
                    None => String::new(),
                }
            ),
        },
    }
}

fn alternatives(ggufs: &[String]) -> String {
    match ggufs.is_empty() {
        true => String::new(),
        false => format!(" (its GGUF files: {})", ggufs.join(", ")),
    }
}

/// Downloads files of one listing into one repository's cache.
struct Fetcher<'a> {
    http: &'a Http,
    config: &'a HubConfig,
    repo: &'a RepoCache,
    listing: &'a RepoListing,
    model: &'a str,
}

impl Fetcher<'_> {
    /// Makes sure every file of `paths` is in the snapshot; returns the bytes downloaded.
    async fn get_files(&self, paths: &[String], quiet: bool) -> Result<u64> {
        let commit = &self.listing.commit;
        let mut missing = Vec::new();
        for path in paths {
            if self.repo.has(commit, path) {
                continue;
            }
            let remote = self
                .listing
                .files
                .iter()
                .find(|f| &f.path == path)
                .ok_or_else(|| Error::HubNotFound {
                    what: format!("file {path} in {}", self.model),
                })?;
            missing.push(self.describe(remote).await?);
        }
        if missing.is_empty() {
            return Ok(0);
        }
        let total: u64 = missing.iter().map(|r| r.size.unwrap_or(0)).sum();
        check_space(self.repo, &missing, total)?;
        let progress = Progress::new(self.model, total, quiet || self.config.quiet);
        // A few files at once, each over its own connections; the first error ends the fetch
        // (what arrived stays for the next run to resume).
        let downloads = futures::stream::iter(&missing)
            .map(|req| self.get_file(req, &progress))
            .buffer_unordered(FILES_IN_FLIGHT);
        let downloaded = downloads
            .try_fold(0, |sum, n| async move { Ok(sum + n) })
            .await?;
        progress.finish();
        Ok(downloaded)
    }

    /// One missing file into the cache and the snapshot; returns the bytes downloaded.
    async fn get_file(&self, req: &BlobRequest, progress: &Progress) -> Result<u64> {
        let name = req.hash.blob_name();
        let mut downloaded = 0;
        if !self.repo.blob(name).is_file() {
            downloaded =
                ensure_blob(self.http, self.repo, req, self.config.connections, progress).await?;
        }
        self.repo
            .link(&self.listing.commit, &req.path, name)
            .map_err(|source| Error::Io {
                what: format!("linking {} into the snapshot", req.path),
                source,
            })?;
        Ok(downloaded)
    }

    /// The download request for `remote`: its hash and size from the listing, else from the
    /// resolve route's headers (`X-Linked-Etag` / `ETag`, `X-Linked-Size` / `Content-Length`).
    async fn describe(&self, remote: &RemoteFile) -> Result<BlobRequest> {
        let url = format!(
            "{}/{}/resolve/{}/{}",
            self.config.endpoint,
            encode_path(model_repo(self.model)),
            self.listing.commit,
            encode_path(&remote.path)
        );
        let (hash, size) = match &remote.hash {
            Some(h) => (h.clone(), remote.size),
            None => self.head(&url, &remote.path).await?,
        };
        Ok(BlobRequest {
            model: self.model.to_string(),
            path: remote.path.clone(),
            url,
            hash,
            size,
        })
    }

    /// Hash and size of a file from a `HEAD` of its resolve URL (no redirect followed: the
    /// Hub's own answer carries them).
    async fn head(&self, url: &str, path: &str) -> Result<(Hash, Option<u64>)> {
        let reply = self
            .http
            .send(Method::HEAD, url, None, false)
            .await
            .map_err(|message| Error::Hub {
                model: self.model.to_string(),
                message,
            })?;
        if !(reply.status.is_success() || reply.status.is_redirection()) {
            let what = format!("file {path} in {}", self.model);
            return Err(status_error(
                self.model,
                &what,
                reply.status,
                &reply.hub_headers,
                self.http.has_token(),
            ));
        }
        let h = |name: &str| {
            reply
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| {
                    v.trim_start_matches("W/")
                        .trim_matches('"')
                        .to_ascii_lowercase()
                })
        };
        let size = h("x-linked-size")
            .or_else(|| h("content-length"))
            .and_then(|s| s.parse().ok());
        let hash = match (h("x-linked-etag"), h("etag")) {
            (Some(e), _) if api::is_hex(&e, 64) => Hash::Sha256(e),
            (_, Some(e)) if api::is_hex(&e, 64) => Hash::Sha256(e),
            (_, Some(e)) if api::is_hex(&e, 40) => Hash::GitSha1(e),
            _ => {
                return Err(Error::Hub {
                    model: self.model.to_string(),
                    message: format!("the Hub gave no checksum for {path}"),
                });
            }
        };
        Ok((hash, size))
    }
}

/// Fails before downloading when the cache's file system cannot hold what is missing.
fn check_space(repo: &RepoCache, missing: &[BlobRequest], total: u64) -> Result<()> {
    let dir = repo.dir().join("blobs");
    std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
        what: format!("creating {}", dir.display()),
        source,
    })?;
    let have: u64 = missing
        .iter()
        .map(|r| {
            let name = r.hash.blob_name();
            let streamed = repo.incomplete(name).metadata().map_or(0, |m| m.len());
            streamed + parts::kept_bytes(repo, name, r.size.unwrap_or(0))
        })
        .sum();
    let need = total.saturating_sub(have);
    match shortfall(need, free_bytes(&dir)) {
        Some(detail) => Err(Error::DiskFull {
            what: dir.display().to_string(),
            detail,
        }),
        None => Ok(()),
    }
}

/// What is short when `need` bytes must fit in `free` (unknown free space is not short).
fn shortfall(need: u64, free: Option<u64>) -> Option<String> {
    let free = free.filter(|&f| f < need)?;
    Some(format!(
        "{} more are needed, {} are free",
        super::progress::human_bytes(need),
        super::progress::human_bytes(free)
    ))
}

/// Bytes an unprivileged process may still write on the file system of `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a valid NUL-terminated string and `stat` points to writable memory
    // of the right type; statvfs fills it completely when it returns 0.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised `stat`.
    let stat = unsafe { stat.assume_init() };
    // The field types differ between platforms (u32 on some 32-bit ones).
    #[allow(clippy::unnecessary_cast)]
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_too_small_is_reported_before_downloading() {
        assert_eq!(shortfall(10, Some(10)), None);
        assert_eq!(shortfall(10, None), None);
        let detail = shortfall(16 << 30, Some(3 << 30)).unwrap_or_default();
        assert!(
            detail.contains("16.00 GiB more are needed, 3.00 GiB are free"),
            "{detail}"
        );
        let err = Error::DiskFull {
            what: "/cache/blobs".into(),
            detail,
        };
        assert!(
            err.to_string()
                .starts_with("not enough disk space in /cache/blobs: 16.00 GiB"),
            "{err}"
        );
    }

    #[test]
    fn status_errors_name_what_was_not_found() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-error-code",
            ::http::HeaderValue::from_static("RepoNotFound"),
        );
        let e = status_error(
            "hf://a/b@v/f.gguf",
            "file f.gguf",
            StatusCode::NOT_FOUND,
            &headers,
            false,
        );
        assert_eq!(
            e.to_string(),
            "repository a/b was not found on the Hub (404)"
        );
        let e = status_error(
            "hf://a/b",
            "revision main of a/b",
            StatusCode::NOT_FOUND,
            &HeaderMap::new(),
            false,
        );
        assert_eq!(
            e.to_string(),
            "revision main of a/b was not found on the Hub (404)"
        );
        let e = status_error(
            "hf://a/b",
            "x",
            StatusCode::BAD_GATEWAY,
            &HeaderMap::new(),
            false,
        );
        assert_eq!(
            e.to_string(),
            "hf://a/b: x: the Hub answered 502 Bad Gateway"
        );
        assert_eq!(
            encode_path("sub dir/model+1.gguf"),
            "sub%20dir/model%2B1.gguf"
        );
    }
}
