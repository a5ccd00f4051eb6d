//! Where batch jobs live between requests and across restarts: files' metadata, batch
//! records, per-line results, and the claims (with leases) by which gateway pods share the
//! lines of a batch.
//!
//! Two stores with one contract. `Local`: files on this pod's disk (one gateway, or a
//! PersistentVolume), every write flushed before it is acknowledged. `Redis`: the Redis the
//! shared limits use, so every gateway pod sees and advances every batch; a pod that dies
//! leaves its claims to expire and another takes them over.
//!
//! The contract both keep:
//! - a line's result is recorded once: the first `record` wins, a second is refused (so a
//!   line run twice, after a lease ran out, is not counted or written twice);
//! - `claim` hands out a line that has no result and no live lease, to one caller;
//! - `replace_batch` is a compare-and-set on the record's `version`.

mod local;
mod redis;

pub use local::LocalState;
pub use redis::RedisState;

use std::time::Duration;

use super::types::{BatchRecord, FileMeta, LineResult, Progress};

/// Why a state call failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing the local directory failed.
    #[error("batch state on disk: {0}")]
    Io(#[from] std::io::Error),
    /// The shared store failed.
    #[error("batch state in redis: {0}")]
    Store(#[from] crate::store::StoreError),
    /// A stored record cannot be read back.
    #[error("batch state: a stored record is corrupt: {0}")]
    Corrupt(String),
}

/// The batch state store (see the module doc for the contract).
#[derive(Clone)]
pub enum State {
    /// One pod, local disk.
    Local(LocalState),
    /// Shared by every pod through Redis.
    Redis(RedisState),
}

macro_rules! each {
    ($self:ident, $state:ident => $call:expr) => {
        match $self {
            State::Local($state) => $call,
            State::Redis($state) => $call,
        }
    };
}

impl State {
    /// Stores a new file's metadata.
    pub async fn put_file(&self, meta: &FileMeta) -> Result<(), StateError> {
        each!(self, s => s.put_file(meta).await)
    }

    /// File `id`'s metadata.
    pub async fn file(&self, id: &str) -> Result<Option<FileMeta>, StateError> {
        each!(self, s => s.file(id).await)
    }

    /// The tenant's files, newest first.
    pub async fn files(&self, tenant: &str) -> Result<Vec<FileMeta>, StateError> {
        each!(self, s => s.files(tenant).await)
    }

    /// Forgets file `id` (its bytes are the caller's to delete).
    pub async fn delete_file(&self, id: &str) -> Result<(), StateError> {
        each!(self, s => s.delete_file(id).await)
    }

    /// Stores a new batch.
    pub async fn put_batch(&self, batch: &BatchRecord) -> Result<(), StateError> {
        each!(self, s => s.put_batch(batch).await)
    }

    /// Batch `id`.
    pub async fn batch(&self, id: &str) -> Result<Option<BatchRecord>, StateError> {
        each!(self, s => s.batch(id).await)
    }

    /// The tenant's batches, newest first.
    pub async fn batches(&self, tenant: &str) -> Result<Vec<BatchRecord>, StateError> {
        each!(self, s => s.batches(tenant).await)
    }

    /// Every batch not yet in a terminal status, of every tenant.
    pub async fn active(&self) -> Result<Vec<BatchRecord>, StateError> {
        each!(self, s => s.active().await)
    }

    /// Replaces a batch if the stored one still has `batch.version - 1`; `false` when
    /// another pod changed it first (read it again and retry).
    pub async fn replace_batch(&self, batch: &BatchRecord) -> Result<bool, StateError> {
        each!(self, s => s.replace_batch(batch).await)
    }

    /// Up to `max` lines of batch `id` (0-based indices below `total`) with no result and no
    /// live lease, now leased to `worker` for `lease`.
    pub async fn claim(
        &self,
        id: &str,
        total: u32,
        max: u32,
        worker: &str,
        lease: Duration,
    ) -> Result<Vec<u32>, StateError> {
        each!(self, s => s.claim(id, total, max, worker, lease).await)
    }

    /// Extends `worker`'s leases on `lines` (still running).
    pub async fn renew(
        &self,
        id: &str,
        worker: &str,
        lines: &[u32],
        lease: Duration,
    ) -> Result<(), StateError> {
        each!(self, s => s.renew(id, worker, lines, lease).await)
    }

    /// Gives `lines` back unanswered (to be claimed again).
    pub async fn release(&self, id: &str, lines: &[u32]) -> Result<(), StateError> {
        each!(self, s => s.release(id, lines).await)
    }

    /// Records line `index`'s result and drops its lease; `false` when it already had one
    /// (this answer is dropped).
    pub async fn record(
        &self,
        id: &str,
        index: u32,
        result: &LineResult,
    ) -> Result<bool, StateError> {
        each!(self, s => s.record(id, index, result).await)
    }

    /// Answered lines and their tokens so far.
    pub async fn progress(&self, id: &str) -> Result<Progress, StateError> {
        each!(self, s => s.progress(id).await)
    }

    /// Lines leased and not yet answered, their leases still live.
    pub async fn leased(&self, id: &str) -> Result<u32, StateError> {
        each!(self, s => s.leased(id).await)
    }

    /// Every recorded result, by line index (any order).
    pub async fn results(&self, id: &str) -> Result<Vec<(u32, LineResult)>, StateError> {
        each!(self, s => s.results(id).await)
    }

    /// Drops batch `id`'s results and claims (once its files are written).
    pub async fn forget_work(&self, id: &str) -> Result<(), StateError> {
        each!(self, s => s.forget_work(id).await)
    }
}
