//! The OpenAI Batch API: `/v1/files` and `/v1/batches` (`api`), run on the capacity
//! interactive traffic leaves (`runner`), durable across restarts and shared by gateway pods
//! (`state` for job state and work claims, `objects` for the files).
//!
//! A batch's life: `validating` (every line checked, `validate`; a bad file fails the batch
//! and runs nothing) → `in_progress` (pods claim lines with leases and send each through the
//! same parse, admission, routing and engines as interactive requests, in the `batch`
//! class, only while capacity is left) → `finalizing` (one pod writes the output and error
//! files from the recorded results) → `completed`; or `expired` when its window runs out,
//! `cancelling` → `cancelled` when its owner cancels it.

pub mod api;
pub mod backlog;
pub mod files;
pub mod form_stream;
pub mod metrics;
pub mod multipart;
pub mod object_upload;
pub mod objects;
pub mod pace;
pub mod pacing;
pub mod runner;
mod section;
pub mod state;
pub mod types;
pub mod upload;
pub mod validate;

pub use section::validate_section;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{BatchConfig, BatchStateKind, Config, TokenConfig};
use crate::store::RedisClient;
use objects::Objects;
use state::{LocalState, RedisState, State};

/// Why the Batch API cannot start from its settings.
#[derive(Debug, thiserror::Error)]
pub enum BatchSetupError {
    /// The local folder cannot be used.
    #[error("batch.dir {0}: {1}")]
    Dir(PathBuf, String),
    /// The object store cannot be opened.
    #[error("batch.objects: {0}")]
    Objects(String),
    /// `batch.state: redis` without a Redis.
    #[error("batch.state: redis needs limits.store: redis")]
    NoRedis,
}

/// The Batch API of one gateway pod.
pub struct Batches {
    /// Job state and claims.
    pub state: State,
    /// File bytes.
    pub objects: Objects,
    /// The settings.
    pub config: BatchConfig,
    /// Prompt estimate and default `max_tokens`, as for interactive requests.
    pub tokens: TokenConfig,
    /// Batch metrics (the `batch` class, apart from interactive ones).
    pub metrics: metrics::BatchMetrics,
    /// This pod's name in claims.
    pub pod: String,
    /// Wakes the runner (a batch was created or cancelled).
    pub wake: tokio::sync::Notify,
    /// Where the jobs are, for logs (`the folder …`, or Redis and the bucket).
    pub describe: String,
    /// The pod's bounds uploads share with requests.
    pub bounds: upload::UploadBounds,
}

impl Batches {
    /// Opens the stores `config.batch` names (`redis`: the limits' client); uploads take
    /// the pod's `bounds`.
    pub fn open(
        config: &Config,
        redis: Option<&RedisClient>,
        bounds: upload::UploadBounds,
    ) -> Result<Arc<Self>, BatchSetupError> {
        let settings = &config.batch;
        let dir = settings.dir.clone().unwrap_or_else(default_dir);
        let state = match settings.state {
            BatchStateKind::Local => State::Local(
                LocalState::open(&dir.join("state"))
                    .map_err(|e| BatchSetupError::Dir(dir.clone(), e.to_string()))?,
            ),
            BatchStateKind::Redis => State::Redis(RedisState::new(
                redis.ok_or(BatchSetupError::NoRedis)?.clone(),
            )),
        };
        let objects = match &settings.objects {
            None => Objects::in_dir(&dir).map_err(BatchSetupError::Objects)?,
            Some(text) => {
                let location = objects::parse_location(text).map_err(BatchSetupError::Objects)?;
                Objects::open(&location).map_err(BatchSetupError::Objects)?
            }
        };
        let describe = match settings.state {
            BatchStateKind::Local => format!("{} (files in {})", dir.display(), objects.describe),
            BatchStateKind::Redis => format!("Redis (files in {})", objects.describe),
        };
        tracing::info!(store = %describe, "Batch API on");
        Ok(Arc::new(Self {
            describe,
            state,
            objects,
            config: settings.clone(),
            tokens: config.tokens.clone(),
            metrics: metrics::BatchMetrics::default(),
            pod: crate::store::membership::pod_id(),
            wake: tokio::sync::Notify::new(),
            bounds,
        }))
    }

    /// How long a claim on a line lasts unless renewed.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.config.lease_ms)
    }

    /// The limits every input file is checked against.
    pub fn validate_limits(&self) -> validate::Limits {
        validate::Limits {
            max_line_bytes: self.config.max_line_bytes,
            max_lines: self.config.max_lines,
            max_file_bytes: self.config.max_file_bytes,
        }
    }
}

/// The folder of the local store when `batch.dir` is not set: the user's data directory.
pub fn default_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".local/share"))
        })
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("tokenscale/batch")
}
