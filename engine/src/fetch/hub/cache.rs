//! The Hugging Face cache layout, shared with `huggingface_hub` (a model fetched by either is
//! found by the other): under the hub cache directory, `models--ORG--REPO/` holds `blobs/`
//! (files by content hash, downloads in progress as `*.incomplete`), `snapshots/COMMIT/` (the
//! repository's paths as relative links into `blobs/`) and `refs/REVISION` (the commit a
//! branch or tag resolved to last). Locks live in `.locks/models--ORG--REPO/`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::api::is_hex;

/// Where the hub cache is for these environment values: `HF_HUB_CACHE`, else `HF_HOME/hub`,
/// else `XDG_CACHE_HOME/huggingface/hub`, else `HOME/.cache/huggingface/hub` (empty values
/// count as unset).
pub fn hub_cache_dir(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("HF_HUB_CACHE") {
        return Some(dir);
    }
    Some(hf_home(env)?.join("hub"))
}

/// `HF_HOME`, else `XDG_CACHE_HOME/huggingface`, else `HOME/.cache/huggingface`.
pub fn hf_home(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HOME")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("huggingface")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("huggingface")))
}

/// One repository's part of the cache.
#[derive(Debug, Clone)]
pub struct RepoCache {
    /// `models--ORG--REPO`.
    dir: PathBuf,
    locks: PathBuf,
}

impl RepoCache {
    /// The cache of `repo` (`org/name`) under the hub cache directory `root`.
    pub fn new(root: &Path, repo: &str) -> Self {
        let folder = format!("models--{}", repo.replace('/', "--"));
        Self {
            dir: root.join(&folder),
            locks: root.join(".locks").join(folder),
        }
    }

    /// The repository's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn blob(&self, name: &str) -> PathBuf {
        self.dir.join("blobs").join(name)
    }

    /// Where a download of blob `name` accumulates until it is verified.
    pub fn incomplete(&self, name: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{name}.incomplete"))
    }

    /// Where a download of blob `name` over several ranged connections accumulates: the whole
    /// file's length from the start, parts written at their offsets. Not `.incomplete`:
    /// `huggingface_hub` resumes that by appending at its length, which here would be a file
    /// with holes.
    pub fn parted(&self, name: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{name}.parted"))
    }

    /// The parts of [`Self::parted`] that are on disk (written after their data is synced).
    pub fn parted_ledger(&self, name: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{name}.parted.done"))
    }

    pub fn lock(&self, name: &str) -> PathBuf {
        self.locks.join(format!("{name}.lock"))
    }

    pub fn snapshot(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    /// The commit `revision` resolved to when last fetched (a commit hash is itself, if its
    /// snapshot exists).
    pub fn cached_commit(&self, revision: &str) -> Option<String> {
        if is_hex(revision, 40) {
            let commit = revision.to_ascii_lowercase();
            return self.snapshot(&commit).is_dir().then_some(commit);
        }
        let text = std::fs::read_to_string(self.dir.join("refs").join(revision)).ok()?;
        let commit = text.trim().to_string();
        is_hex(&commit, 40).then_some(commit)
    }

    /// Records that `revision` (a branch or tag) is at `commit`.
    pub fn write_ref(&self, revision: &str, commit: &str) -> std::io::Result<()> {
        if is_hex(revision, 40) {
            return Ok(());
        }
        let path = self.dir.join("refs").join(revision);
        create_parent(&path)?;
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&tmp, commit)?;
        std::fs::rename(&tmp, &path)
    }

    /// Makes `snapshots/COMMIT/PATH` a relative link to blob `name` (replacing any older one).
    pub fn link(&self, commit: &str, path: &str, name: &str) -> std::io::Result<PathBuf> {
        let link = self.snapshot(commit).join(path);
        create_parent(&link)?;
        // From snapshots/COMMIT/a/b/file up to the repository folder: one `..` per component.
        let depth = path.split('/').count() + 1;
        let target: PathBuf = std::iter::repeat_n("..", depth)
            .collect::<PathBuf>()
            .join("blobs")
            .join(name);
        let tmp = link.with_file_name(format!(
            ".{}.link-{}",
            link.file_name()
                .map_or_else(Default::default, |n| n.to_string_lossy()),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp)?;
        std::fs::rename(&tmp, &link)?;
        Ok(link)
    }

    /// Whether `snapshots/COMMIT/PATH` exists and leads to a file.
    pub fn has(&self, commit: &str, path: &str) -> bool {
        self.snapshot(commit).join(path).is_file()
    }
}

/// Creates the parent directory of `path`.
pub fn create_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(p) => std::fs::create_dir_all(p),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_cache_directory_follows_huggingface_hub() {
        let d = |pairs: &[(&str, &str)]| hub_cache_dir(&env(pairs));
        assert_eq!(
            d(&[("HF_HUB_CACHE", "/c"), ("HF_HOME", "/h")]),
            Some("/c".into())
        );
        assert_eq!(
            d(&[("HF_HOME", "/h"), ("HOME", "/u")]),
            Some("/h/hub".into())
        );
        assert_eq!(
            d(&[("HF_HOME", ""), ("XDG_CACHE_HOME", "/x")]),
            Some("/x/huggingface/hub".into())
        );
        assert_eq!(
            d(&[("HOME", "/u")]),
            Some("/u/.cache/huggingface/hub".into())
        );
        assert_eq!(d(&[]), None);
    }

    #[test]
    fn snapshots_link_into_blobs_and_refs_record_commits() {
        let scratch = tokenscale_scratch::Scratch::in_temp_dir("hub-cache");
        let root = scratch.path();
        let repo = RepoCache::new(root, "Org/Name");
        assert_eq!(repo.dir(), root.join("models--Org--Name"));
        assert_eq!(
            repo.lock("abc"),
            root.join(".locks/models--Org--Name/abc.lock")
        );
        create_parent(&repo.blob("abc")).unwrap();
        std::fs::write(repo.blob("abc"), b"weights").unwrap();
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let link = repo.link(commit, "sub/dir/file.bin", "abc").unwrap();
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../../../../blobs/abc")
        );
        assert_eq!(std::fs::read(&link).unwrap(), b"weights");
        assert!(repo.has(commit, "sub/dir/file.bin") && !repo.has(commit, "other"));
        assert_eq!(repo.cached_commit("main"), None);
        repo.write_ref("main", commit).unwrap();
        assert_eq!(repo.cached_commit("main").as_deref(), Some(commit));
        assert_eq!(
            repo.cached_commit(&commit.to_uppercase()).as_deref(),
            Some(commit)
        );
    }
}
