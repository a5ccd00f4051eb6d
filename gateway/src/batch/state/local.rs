//! The batch state on this pod's disk: one JSON file per file and per batch (written to a
//! temporary name, flushed, then renamed over the old one), and one append-only log of
//! results per batch, each line flushed before `record` returns. Read back whole at start;
//! claims live in memory, so after a restart every line without a result is claimable again
//! (the lines that were running when the gateway died run again; no answered line does).

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::StateError;
use crate::batch::types::{BatchRecord, BatchStatus, FileMeta, LineResult, Progress, now_ms};

/// The local store; clones share it.
#[derive(Clone)]
pub struct LocalState {
    inner: Arc<Mutex<Inner>>,
    dir: Arc<PathBuf>,
    /// The folder's lock, held while the process lives: a second gateway on the same folder
    /// would run the same lines again.
    _lock: Arc<std::fs::File>,
}

#[derive(Default)]
struct Inner {
    files: HashMap<String, FileMeta>,
    batches: HashMap<String, BatchRecord>,
    work: HashMap<String, Work>,
}

/// One batch's lines: results, leases, and the next line never handed out.
#[derive(Default)]
struct Work {
    results: HashMap<u32, LineResult>,
    progress: Progress,
    /// Line → lease end (ms since the epoch).
    leases: HashMap<u32, u64>,
    /// Lines given back unanswered.
    returned: BTreeSet<u32>,
    cursor: u32,
    log: Option<std::fs::File>,
}

/// One line of a results log.
#[derive(serde::Serialize, serde::Deserialize)]
struct Logged {
    index: u32,
    result: LineResult,
}

impl LocalState {
    /// Opens (creating) the store under `dir` and reads back what it holds.
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        for sub in ["files", "batches", "results"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let lock = std::fs::File::create(dir.join("LOCK"))?;
        if let Err(error) = lock.try_lock() {
            let reason = match error {
                std::fs::TryLockError::WouldBlock => format!(
                    "{} is used by another gateway process (a local store is one process's; \
                     several gateways share batches through `state: redis`)",
                    dir.display()
                ),
                std::fs::TryLockError::Error(error) => error.to_string(),
            };
            return Err(StateError::Io(std::io::Error::other(reason)));
        }
        let mut inner = Inner::default();
        for meta in read_all::<FileMeta>(&dir.join("files"))? {
            inner.files.insert(meta.id.clone(), meta);
        }
        for batch in read_all::<BatchRecord>(&dir.join("batches"))? {
            inner.batches.insert(batch.id.clone(), batch);
        }
        for entry in std::fs::read_dir(dir.join("results"))? {
            let path = entry?.path();
            let Some(id) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            inner.work.insert(id.to_string(), read_log(&path)?);
        }
        Ok(Self {
            inner: Arc::new(Mutex::new(inner)),
            dir: Arc::new(dir.to_path_buf()),
            _lock: Arc::new(lock),
        })
    }

    /// Runs `f` on the state off the async threads (it may write and flush files).
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Inner, &Path) -> Result<T, StateError> + Send + 'static,
    ) -> Result<T, StateError> {
        let (inner, dir) = (self.inner.clone(), self.dir.clone());
        tokio::task::spawn_blocking(move || f(&mut lock(&inner), &dir))
            .await
            .map_err(|e| StateError::Io(std::io::Error::other(e)))?
    }

    pub(super) async fn put_file(&self, meta: &FileMeta) -> Result<(), StateError> {
        let meta = meta.clone();
        self.with(move |inner, dir| {
            write_json(&dir.join("files"), &meta.id, &meta)?;
            inner.files.insert(meta.id.clone(), meta);
            Ok(())
        })
        .await
    }

    pub(super) async fn file(&self, id: &str) -> Result<Option<FileMeta>, StateError> {
        Ok(lock(&self.inner).files.get(id).cloned())
    }

    pub(super) async fn files(&self, tenant: &str) -> Result<Vec<FileMeta>, StateError> {
        let mut files: Vec<_> = lock(&self.inner)
            .files
            .values()
            .filter(|f| f.tenant == tenant)
            .cloned()
            .collect();
        files.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        Ok(files)
    }

    pub(super) async fn delete_file(&self, id: &str) -> Result<(), StateError> {
        let id = id.to_string();
        self.with(move |inner, dir| {
            inner.files.remove(&id);
            remove_if_there(&dir.join("files").join(format!("{id}.json")))
        })
        .await
    }

    pub(super) async fn put_batch(&self, batch: &BatchRecord) -> Result<(), StateError> {
        let batch = batch.clone();
        self.with(move |inner, dir| {
            write_json(&dir.join("batches"), &batch.id, &batch)?;
            inner.batches.insert(batch.id.clone(), batch);
            Ok(())
        })
        .await
    }

    pub(super) async fn batch(&self, id: &str) -> Result<Option<BatchRecord>, StateError> {
        Ok(lock(&self.inner).batches.get(id).cloned())
    }

    pub(super) async fn batches(&self, tenant: &str) -> Result<Vec<BatchRecord>, StateError> {
        let mut batches: Vec<_> = lock(&self.inner)
            .batches
            .values()
            .filter(|b| b.tenant == tenant)
            .cloned()
            .collect();
        batches.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        Ok(batches)
    }

    pub(super) async fn active(&self) -> Result<Vec<BatchRecord>, StateError> {
        let mut batches: Vec<_> = lock(&self.inner)
            .batches
            .values()
            .filter(|b| !b.status.is_terminal())
            .cloned()
            .collect();
        batches.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(batches)
    }

    pub(super) async fn replace_batch(&self, batch: &BatchRecord) -> Result<bool, StateError> {
        let batch = batch.clone();
        self.with(move |inner, dir| {
            let current = inner.batches.get(&batch.id).map(|b| b.version);
            if current.map(|v| v + 1) != Some(batch.version) {
                return Ok(false);
            }
            write_json(&dir.join("batches"), &batch.id, &batch)?;
            inner.batches.insert(batch.id.clone(), batch);
            Ok(true)
        })
        .await
    }

    pub(super) async fn claim(
        &self,
        id: &str,
        total: u32,
        max: u32,
        _worker: &str,
        lease: Duration,
    ) -> Result<Vec<u32>, StateError> {
        let mut inner = lock(&self.inner);
        let work = inner.work.entry(id.to_string()).or_default();
        let now = now_ms();
        let until = now + lease.as_millis() as u64;
        let expired: Vec<u32> = work
            .leases
            .iter()
            .filter(|&(_, &end)| end <= now)
            .map(|(&line, _)| line)
            .collect();
        for line in expired {
            work.leases.remove(&line);
            work.returned.insert(line);
        }
        let mut claimed = Vec::new();
        while claimed.len() < max as usize {
            let Some(line) = work.returned.pop_first() else {
                break;
            };
            if !work.results.contains_key(&line) && line < total {
                work.leases.insert(line, until);
                claimed.push(line);
            }
        }
        while claimed.len() < max as usize && work.cursor < total {
            let line = work.cursor;
            work.cursor += 1;
            if !work.results.contains_key(&line) && !work.leases.contains_key(&line) {
                work.leases.insert(line, until);
                claimed.push(line);
            }
        }
        Ok(claimed)
    }

    pub(super) async fn renew(
        &self,
        id: &str,
        _worker: &str,
        lines: &[u32],
        lease: Duration,
    ) -> Result<(), StateError> {
        let mut inner = lock(&self.inner);
        if let Some(work) = inner.work.get_mut(id) {
            let until = now_ms() + lease.as_millis() as u64;
            for line in lines {
                if let Some(end) = work.leases.get_mut(line) {
                    *end = until;
                }
            }
        }
        Ok(())
    }

    pub(super) async fn release(&self, id: &str, lines: &[u32]) -> Result<(), StateError> {
        let mut inner = lock(&self.inner);
        if let Some(work) = inner.work.get_mut(id) {
            for &line in lines {
                if work.leases.remove(&line).is_some() {
                    work.returned.insert(line);
                }
            }
        }
        Ok(())
    }

    pub(super) async fn record(
        &self,
        id: &str,
        index: u32,
        result: &LineResult,
    ) -> Result<bool, StateError> {
        let (id, result) = (id.to_string(), result.clone());
        self.with(move |inner, dir| {
            // A line answered after its batch ended (expired, cancelled) is too late: the
            // files are written; keeping it would only leave a log behind.
            let open = inner.batches.get(&id).is_some_and(|b| {
                matches!(b.status, BatchStatus::InProgress | BatchStatus::Cancelling)
            });
            if !open {
                return Ok(false);
            }
            let work = inner.work.entry(id.clone()).or_default();
            if work.results.contains_key(&index) {
                return Ok(false);
            }
            if work.log.is_none() {
                let path = dir.join("results").join(format!("{id}.jsonl"));
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                work.log = Some(file);
            }
            let mut text = serde_json::to_string(&Logged {
                index,
                result: result.clone(),
            })
            .map_err(|e| StateError::Corrupt(e.to_string()))?;
            text.push('\n');
            if let Some(log) = work.log.as_mut() {
                log.write_all(text.as_bytes())?;
                // Acknowledged only once on disk: a line answered is never run again.
                log.sync_data()?;
            }
            work.leases.remove(&index);
            work.progress.add(&result);
            work.results.insert(index, result);
            Ok(true)
        })
        .await
    }

    pub(super) async fn progress(&self, id: &str) -> Result<Progress, StateError> {
        Ok(lock(&self.inner)
            .work
            .get(id)
            .map(|w| w.progress)
            .unwrap_or_default())
    }

    pub(super) async fn leased(&self, id: &str) -> Result<u32, StateError> {
        let now = now_ms();
        Ok(lock(&self.inner).work.get(id).map_or(0, |w| {
            w.leases.values().filter(|&&end| end > now).count() as u32
        }))
    }

    pub(super) async fn results(&self, id: &str) -> Result<Vec<(u32, LineResult)>, StateError> {
        Ok(lock(&self.inner).work.get(id).map_or_else(Vec::new, |w| {
            w.results.iter().map(|(&i, r)| (i, r.clone())).collect()
        }))
    }

    pub(super) async fn forget_work(&self, id: &str) -> Result<(), StateError> {
        let id = id.to_string();
        self.with(move |inner, dir| {
            inner.work.remove(&id);
            remove_if_there(&dir.join("results").join(format!("{id}.jsonl")))
        })
        .await
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes `value` as `dir/{name}.json`: to a temporary file, flushed, renamed over the old
/// one, the folder flushed (a crash leaves the old record or the new one, never half).
fn write_json<T: serde::Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), StateError> {
    let text = serde_json::to_vec(value).map_err(|e| StateError::Corrupt(e.to_string()))?;
    let temporary = dir.join(format!(".{name}.json.tmp"));
    {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, dir.join(format!("{name}.json")))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

fn remove_if_there(path: &Path) -> Result<(), StateError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Every `*.json` record in `dir` (temporaries of an interrupted write are skipped).
fn read_all<T: serde::de::DeserializeOwned>(dir: &Path) -> Result<Vec<T>, StateError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        let bytes = std::fs::read(&path)?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| StateError::Corrupt(format!("{}: {e}", path.display())))?;
        out.push(value);
    }
    Ok(out)
}

/// A results log read back; a last line cut short by a crash is dropped (its line was not
/// acknowledged, so it runs again).
fn read_log(path: &Path) -> Result<Work, StateError> {
    let text = std::fs::read_to_string(path)?;
    let mut work = Work::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Logged>(line) {
            Ok(logged) => {
                if !work.results.contains_key(&logged.index) {
                    work.progress.add(&logged.result);
                    work.results.insert(logged.index, logged.result);
                }
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "batch results: a torn line is dropped");
            }
        }
    }
    Ok(work)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscale_scratch::Scratch;

    fn result(ok: bool) -> LineResult {
        LineResult {
            ok,
            line: "{}".into(),
            prompt_tokens: 3,
            cached_tokens: 0,
            completion_tokens: 5,
        }
    }

    fn temporary_dir(name: &str) -> Scratch {
        Scratch::in_temp_dir(&format!("batch-{name}"))
    }

    async fn running(state: &LocalState, id: &str) {
        let mut batch = crate::batch::types::tests::sample();
        batch.id = id.into();
        batch.status = BatchStatus::InProgress;
        state.put_batch(&batch).await.expect("ok");
    }

    #[tokio::test]
    async fn a_line_answered_after_its_batch_ended_is_not_kept() {
        let dir = temporary_dir("late");
        let state = LocalState::open(dir.path()).expect("ok");
        let mut batch = crate::batch::types::tests::sample();
        batch.status = BatchStatus::Expired;
        state.put_batch(&batch).await.expect("ok");
        assert!(!state.record("batch-1", 0, &result(true)).await.expect("ok"));
        assert_eq!(
            state.progress("batch-1").await.expect("ok"),
            Progress::default()
        );
    }

    #[tokio::test]
    async fn claims_skip_answered_and_leased_lines_and_results_survive_a_restart() {
        let dir = temporary_dir("claims");
        let state = LocalState::open(dir.path()).expect("ok");
        running(&state, "b").await;
        let lease = Duration::from_secs(60);
        assert_eq!(
            state.claim("b", 5, 2, "w", lease).await.expect("ok"),
            [0, 1]
        );
        assert_eq!(
            state.claim("b", 5, 2, "w", lease).await.expect("ok"),
            [2, 3]
        );
        assert!(state.record("b", 0, &result(true)).await.expect("ok"));
        assert!(
            !state.record("b", 0, &result(false)).await.expect("ok"),
            "first wins"
        );
        state.release("b", &[1]).await.expect("ok");
        assert_eq!(
            state.claim("b", 5, 5, "w", lease).await.expect("ok"),
            [1, 4]
        );
        assert_eq!(state.leased("b").await.expect("ok"), 4);
        assert!(state.record("b", 2, &result(false)).await.expect("ok"));
        let progress = state.progress("b").await.expect("ok");
        assert_eq!((progress.completed, progress.failed), (1, 1));
        assert_eq!(progress.completion_tokens, 10);

        // A restart: the answered lines stay answered, every other line is claimable.
        drop(state);
        let reopened = LocalState::open(dir.path()).expect("ok");
        assert_eq!(reopened.progress("b").await.expect("ok"), progress);
        assert_eq!(
            reopened.claim("b", 5, 10, "w", lease).await.expect("ok"),
            [1, 3, 4]
        );
    }

    #[test]
    fn a_second_process_on_the_same_folder_is_refused_with_the_reason() {
        let dir = temporary_dir("lock");
        let first = LocalState::open(dir.path()).expect("ok");
        let second = LocalState::open(dir.path()).err().map(|e| e.to_string());
        assert!(
            second
                .as_deref()
                .is_some_and(|e| e.contains("another gateway process")),
            "{second:?}"
        );
        drop(first);
        assert!(
            LocalState::open(dir.path()).is_ok(),
            "free once the first is gone"
        );
    }

    #[tokio::test]
    async fn an_expired_lease_is_claimed_again() {
        let dir = temporary_dir("lease");
        let state = LocalState::open(dir.path()).expect("ok");
        assert_eq!(
            state
                .claim("b", 2, 1, "w", Duration::ZERO)
                .await
                .expect("ok"),
            [0]
        );
        assert_eq!(
            state
                .claim("b", 2, 2, "v", Duration::from_secs(9))
                .await
                .expect("ok"),
            [0, 1]
        );
    }

    #[tokio::test]
    async fn a_torn_last_log_line_is_dropped() {
        let dir = temporary_dir("torn");
        let state = LocalState::open(dir.path()).expect("ok");
        running(&state, "b").await;
        state.record("b", 0, &result(true)).await.expect("ok");
        let log = dir.join("results/b.jsonl");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("ok");
        file.write_all(b"{\"index\":1,\"resu").expect("ok");
        drop(state);
        let reopened = LocalState::open(dir.path()).expect("ok");
        assert_eq!(reopened.progress("b").await.expect("ok").completed, 1);
        assert_eq!(reopened.results("b").await.expect("ok").len(), 1);
    }

    #[tokio::test]
    async fn replace_is_compare_and_set_and_survives_a_restart() {
        let dir = temporary_dir("cas");
        let state = LocalState::open(dir.path()).expect("ok");
        let mut batch = crate::batch::types::tests::sample();
        state.put_batch(&batch).await.expect("ok");
        batch.version = 1;
        batch.status = BatchStatus::InProgress;
        assert!(state.replace_batch(&batch).await.expect("ok"));
        assert!(
            !state.replace_batch(&batch).await.expect("ok"),
            "stale version"
        );
        drop(state);
        let reopened = LocalState::open(dir.path()).expect("ok");
        let stored = reopened.batch("batch-1").await.expect("ok").expect("ok");
        assert_eq!(stored.status, BatchStatus::InProgress);
        assert_eq!(reopened.active().await.expect("ok").len(), 1);
    }
}
