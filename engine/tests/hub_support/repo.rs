//! The test Hub's view of its directory: `ROOT/ORG/REPO/` is a repository at `main`, and
//! `ROOT/ORG/REPO@REV/` the same repository at revision `REV`. Files are listed recursively
//! (dot-files left out); a revision's commit is a SHA-1 over its paths and contents, so it
//! changes exactly when a file does. Files ending in `.safetensors` or `.gguf` are LFS files
//! (SHA-256 ETag, redirect to the CDN), the others plain Git blobs (SHA-1 blob id), as on
//! the real Hub.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::Digest;

/// One file of a revision.
#[derive(Debug, Clone)]
pub struct FileInfo {
    pub path: String,
    pub disk: PathBuf,
    pub size: u64,
    pub sha256: String,
    pub git_sha1: String,
    pub lfs: bool,
}

/// A repository at one revision.
#[derive(Debug, Clone)]
pub struct Revision {
    pub commit: String,
    pub files: Vec<FileInfo>,
}

/// A file as last hashed: path, size, modification time.
type FileStamp = (PathBuf, u64, std::time::SystemTime);

/// Hashes `(sha256, git blob id)` are cached by file stamp (the SmolLM2 checkpoint is 540 MB).
#[derive(Default)]
pub struct HashCache(Mutex<HashMap<FileStamp, (String, String)>>);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl HashCache {
    fn hashes(&self, path: &Path) -> std::io::Result<(u64, String, String)> {
        let meta = std::fs::metadata(path)?;
        let key = (path.to_path_buf(), meta.len(), meta.modified()?);
        if let Some((a, b)) = self.0.lock().expect("hash cache").get(&key) {
            return Ok((meta.len(), a.clone(), b.clone()));
        }
        let mut sha256 = sha2::Sha256::new();
        let mut sha1 = sha1::Sha1::new();
        sha1.update(format!("blob {}\0", meta.len()).as_bytes());
        let mut f = std::fs::File::open(path)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            sha256.update(&buf[..n]);
            sha1.update(&buf[..n]);
        }
        let pair = (hex(&sha256.finalize()), hex(&sha1.finalize()));
        self.0.lock().expect("hash cache").insert(key, pair.clone());
        Ok((meta.len(), pair.0, pair.1))
    }
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let path = e.path();
        if path.is_dir() {
            walk(&path, &rel, out)?;
        } else {
            out.push((rel, path));
        }
    }
    Ok(())
}

/// The repository `org/repo` at `rev` under `root`: `None` for an unknown repository,
/// `Some(Err(()))` for an unknown revision. `rev` may be `main`, a directory's `@REV`, or a
/// commit hash of either.
pub fn revision(
    root: &Path,
    hashes: &HashCache,
    repo: &str,
    rev: &str,
) -> Option<Result<Revision, ()>> {
    let main = root.join(repo);
    if !main.is_dir() {
        return None;
    }
    let mut candidates = vec![("main".to_string(), main.clone())];
    let (org, name) = repo.split_once('/')?;
    if let Ok(entries) = std::fs::read_dir(root.join(org)) {
        for e in entries.flatten() {
            let dir_name = e.file_name().to_string_lossy().into_owned();
            if let Some(r) = dir_name.strip_prefix(&format!("{name}@")) {
                candidates.push((r.to_string(), e.path()));
            }
        }
    }
    for (name, dir) in candidates {
        let r = read_revision(&dir, hashes).ok()?;
        if name == rev || r.commit == rev {
            return Some(Ok(r));
        }
    }
    Some(Err(()))
}

fn read_revision(dir: &Path, hashes: &HashCache) -> std::io::Result<Revision> {
    let mut listed = Vec::new();
    walk(dir, "", &mut listed)?;
    let mut commit = sha1::Sha1::new();
    let mut files = Vec::new();
    for (path, disk) in listed {
        let (size, sha256, git_sha1) = hashes.hashes(&disk)?;
        commit.update(format!("{path}\0{sha256}\n").as_bytes());
        let lfs = path.ends_with(".safetensors") || path.ends_with(".gguf");
        files.push(FileInfo {
            path,
            disk,
            size,
            sha256,
            git_sha1,
            lfs,
        });
    }
    Ok(Revision {
        commit: hex(&commit.finalize()),
        files,
    })
}

impl Revision {
    /// The listing the Hub's `api/models/REPO/revision/REV?blobs=true` returns.
    pub fn listing_json(&self, repo: &str) -> String {
        let siblings: Vec<serde_json::Value> = self
            .files
            .iter()
            .map(|f| {
                let mut s =
                    serde_json::json!({"rfilename": f.path, "blobId": f.git_sha1, "size": f.size});
                if f.lfs {
                    s["lfs"] =
                        serde_json::json!({"sha256": f.sha256, "size": f.size, "pointerSize": 134});
                }
                s
            })
            .collect();
        serde_json::json!({"id": repo, "modelId": repo, "sha": self.commit, "private": false, "siblings": siblings})
            .to_string()
    }

    pub fn file(&self, path: &str) -> Option<&FileInfo> {
        self.files.iter().find(|f| f.path == path)
    }
}
