//! The Batch API's objects as stored (`FileMeta`, `BatchRecord`, `LineResult`) and as
//! OpenAI's clients read them (`to_openai`).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::validate::{Endpoint, LineError};

/// Seconds since the epoch (OpenAI's timestamps).
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Milliseconds since the epoch (leases).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A new id, `{prefix}-` and 24 hex digits: time, process and a counter mixed, unique across
/// gateway pods without asking the store.
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let salt = u64::from(std::process::id()) << 32 ^ NEXT.fetch_add(1, Ordering::Relaxed);
    let mix = crate::routing::picker::mix;
    let high = mix(nanos ^ mix(salt));
    let low = mix(high ^ salt ^ 0x9e37_79b9_7f4a_7c15);
    format!("{prefix}-{:016x}{:08x}", high, low >> 32)
}

/// What a file is for (OpenAI's `purpose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// Uploaded as a batch's input.
    Batch,
    /// A batch's output or error file, written by the gateway.
    BatchOutput,
}

/// A file's metadata; its bytes are in the object store under [`FileMeta::object_key`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileMeta {
    /// `file-…`.
    pub id: String,
    /// The tenant whose key uploaded it (or whose batch wrote it).
    pub tenant: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Upload time, seconds since the epoch.
    pub created_at: u64,
    /// The name the client gave.
    pub filename: String,
    /// What it is for.
    pub purpose: Purpose,
}

impl FileMeta {
    /// Where its bytes are in the object store.
    pub fn object_key(&self) -> String {
        object_key(&self.id)
    }

    /// OpenAI's file object.
    pub fn to_openai(&self) -> Value {
        json!({
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": null,
        })
    }
}

/// The object-store key of file `id`.
pub fn object_key(id: &str) -> String {
    format!("files/{id}")
}

/// A batch's status, as OpenAI names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    /// Its input is being checked; nothing runs yet.
    Validating,
    /// The input failed validation: nothing ran (`errors` says why, line by line).
    Failed,
    /// Lines are running.
    InProgress,
    /// Every line is answered (or the batch expired or was cancelled): the output and error
    /// files are being written.
    Finalizing,
    /// Done: the output and error files are there.
    Completed,
    /// The completion window ran out first: what finished is in the output file, the rest
    /// in the error file as `batch_expired`.
    Expired,
    /// Cancel asked: no new line starts; the lines running finish.
    Cancelling,
    /// Cancelled: what finished is in the output file.
    Cancelled,
}

impl BatchStatus {
    /// Every status, in the order of the `tokenscale_gateway_batches` series.
    pub const ALL: [BatchStatus; 8] = [
        Self::Validating,
        Self::Failed,
        Self::InProgress,
        Self::Finalizing,
        Self::Completed,
        Self::Expired,
        Self::Cancelling,
        Self::Cancelled,
    ];

    /// Whether the batch will not change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Failed | Self::Completed | Self::Expired | Self::Cancelled
        )
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Validating => "validating",
            Self::Failed => "failed",
            Self::InProgress => "in_progress",
            Self::Finalizing => "finalizing",
            Self::Completed => "completed",
            Self::Expired => "expired",
            Self::Cancelling => "cancelling",
            Self::Cancelled => "cancelled",
        }
    }
}

/// How a finalizing batch ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Closing {
    /// Every line answered.
    Completed,
    /// The window ran out.
    Expired,
    /// Cancelled by its owner.
    Cancelled,
}

/// Answered lines and their tokens (OpenAI's `request_counts` and `usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Progress {
    /// Lines answered with a 2xx.
    pub completed: u32,
    /// Lines answered otherwise.
    pub failed: u32,
    /// Prompt tokens of the answered lines.
    pub prompt_tokens: u64,
    /// Of which served from the prefix cache.
    pub cached_tokens: u64,
    /// Completion tokens of the answered lines.
    pub completion_tokens: u64,
}

impl Progress {
    /// Lines answered either way.
    pub fn answered(&self) -> u32 {
        self.completed + self.failed
    }

    /// Adds one line's result.
    pub fn add(&mut self, result: &LineResult) {
        if result.ok {
            self.completed += 1;
        } else {
            self.failed += 1;
        }
        self.prompt_tokens += result.prompt_tokens;
        self.cached_tokens += result.cached_tokens;
        self.completion_tokens += result.completion_tokens;
    }
}

/// One answered line: its line in the output (or error) file, and its tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineResult {
    /// A 2xx answer (output file) or not (error file).
    pub ok: bool,
    /// The JSON line as written to the output or error file (no newline).
    pub line: String,
    /// Prompt tokens (from the answer's `usage`).
    pub prompt_tokens: u64,
    /// Of which cached.
    pub cached_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// A batch as stored. Updated by compare-and-set on `version` (several gateway pods advance
/// the same batch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRecord {
    /// `batch-…`.
    pub id: String,
    /// The tenant whose key created it.
    pub tenant: String,
    /// Bumped by every update.
    pub version: u64,
    /// The API its lines call.
    pub endpoint: Endpoint,
    /// Its input file.
    pub input_file_id: String,
    /// As the client gave it (`24h`).
    pub completion_window: String,
    /// The window in seconds.
    pub window_s: u64,
    /// The client's metadata.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Now.
    pub status: BatchStatus,
    /// The one model its lines use (known once validated).
    #[serde(default)]
    pub model: Option<String>,
    /// Lines in the input (known once validated).
    #[serde(default)]
    pub total: u32,
    /// Output tokens its lines may generate (`max_tokens` or the default, summed).
    #[serde(default)]
    pub reserved_output_tokens: u64,
    /// Estimated prompt tokens of its lines.
    #[serde(default)]
    pub estimated_prompt_tokens: u64,
    /// Why validation failed, line by line.
    #[serde(default)]
    pub errors: Vec<LineError>,
    /// How a finalizing batch ends.
    #[serde(default)]
    pub closing: Option<Closing>,
    /// The pod writing the output files, and until when (ms) it holds that work.
    #[serde(default)]
    pub finalizer: Option<(String, u64)>,
    /// Counts and usage, frozen when the batch ended (live ones are in the state store).
    #[serde(default)]
    pub progress: Progress,
    /// Output file (`file-…`), once written.
    #[serde(default)]
    pub output_file_id: Option<String>,
    /// Error file, once written, when some line failed.
    #[serde(default)]
    pub error_file_id: Option<String>,
    /// Timestamps (seconds since the epoch), OpenAI's names.
    pub created_at: u64,
    /// When the window ends.
    pub expires_at: u64,
    /// When validation passed.
    #[serde(default)]
    pub in_progress_at: Option<u64>,
    /// When finalizing began.
    #[serde(default)]
    pub finalizing_at: Option<u64>,
    /// When it completed.
    #[serde(default)]
    pub completed_at: Option<u64>,
    /// When validation failed.
    #[serde(default)]
    pub failed_at: Option<u64>,
    /// When the window ran out.
    #[serde(default)]
    pub expired_at: Option<u64>,
    /// When cancel was asked.
    #[serde(default)]
    pub cancelling_at: Option<u64>,
    /// When it was cancelled.
    #[serde(default)]
    pub cancelled_at: Option<u64>,
}

/// What a client asks for when it creates a batch.
#[derive(Debug, Clone)]
pub struct NewBatch {
    /// The tenant whose key created it.
    pub tenant: String,
    /// The API its lines call.
    pub endpoint: Endpoint,
    /// Its input file.
    pub input_file_id: String,
    /// As the client gave it.
    pub completion_window: String,
    /// The window in seconds.
    pub window_s: u64,
    /// The client's metadata.
    pub metadata: Option<BTreeMap<String, String>>,
}

impl BatchRecord {
    /// A new batch, `validating`, created at `now_s`.
    pub fn new(id: String, new: NewBatch, now_s: u64) -> Self {
        Self {
            id,
            tenant: new.tenant,
            version: 0,
            endpoint: new.endpoint,
            input_file_id: new.input_file_id,
            completion_window: new.completion_window,
            window_s: new.window_s,
            metadata: new.metadata,
            status: BatchStatus::Validating,
            model: None,
            total: 0,
            reserved_output_tokens: 0,
            estimated_prompt_tokens: 0,
            errors: Vec::new(),
            closing: None,
            finalizer: None,
            progress: Progress::default(),
            output_file_id: None,
            error_file_id: None,
            created_at: now_s,
            expires_at: now_s + new.window_s,
            in_progress_at: None,
            finalizing_at: None,
            completed_at: None,
            failed_at: None,
            expired_at: None,
            cancelling_at: None,
            cancelled_at: None,
        }
    }

    /// OpenAI's batch object; `live` is the state store's progress while the batch runs.
    pub fn to_openai(&self, live: Option<Progress>) -> Value {
        let progress = live.unwrap_or(self.progress);
        let errors =
            (!self.errors.is_empty()).then(|| json!({"object": "list", "data": self.errors}));
        json!({
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": errors,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": self.in_progress_at,
            "expires_at": self.expires_at,
            "finalizing_at": self.finalizing_at,
            "completed_at": self.completed_at,
            "failed_at": self.failed_at,
            "expired_at": self.expired_at,
            "cancelling_at": self.cancelling_at,
            "cancelled_at": self.cancelled_at,
            "request_counts": {
                "total": self.total,
                "completed": progress.completed,
                "failed": progress.failed,
            },
            "usage": {
                "input_tokens": progress.prompt_tokens,
                "input_tokens_details": {"cached_tokens": progress.cached_tokens},
                "output_tokens": progress.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": progress.prompt_tokens + progress.completion_tokens,
            },
            "metadata": self.metadata,
        })
    }

    /// Output tokens its unanswered lines may still generate (the reservation spread evenly
    /// over the lines: the store counts answers, not which line reserved what).
    pub fn backlog_output_tokens(&self, answered: u32) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let left = u64::from(self.total.saturating_sub(answered));
        self.reserved_output_tokens * left / u64::from(self.total)
    }
}

/// Parses a completion window: OpenAI takes `24h`; tokenscale also takes other hours, minutes
/// and seconds (`90m`, `30s`, `2h`), from one second to seven days.
pub fn parse_window(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = number.parse().ok()?;
    let s = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        "d" => n.checked_mul(86_400)?,
        _ => return None,
    };
    (1..=7 * 86_400).contains(&s).then_some(s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn windows_parse_in_their_units_and_out_of_range_ones_do_not() {
        assert_eq!(parse_window("24h"), Some(86_400));
        assert_eq!(parse_window("90m"), Some(5_400));
        assert_eq!(parse_window("30s"), Some(30));
        assert_eq!(parse_window("8d"), None);
        assert_eq!(parse_window("0s"), None);
        assert_eq!(parse_window("h"), None);
        assert_eq!(parse_window("24"), None);
        assert_eq!(parse_window("24 h"), None);
    }

    #[test]
    fn ids_do_not_repeat() {
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| new_id("file")).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.len() == "file-".len() + 24));
    }

    #[test]
    fn backlog_shrinks_with_answers() {
        let mut record = sample();
        record.total = 4;
        record.reserved_output_tokens = 400;
        assert_eq!(record.backlog_output_tokens(0), 400);
        assert_eq!(record.backlog_output_tokens(3), 100);
        assert_eq!(record.backlog_output_tokens(4), 0);
    }

    pub(crate) fn sample() -> BatchRecord {
        let new = NewBatch {
            tenant: "t".into(),
            endpoint: Endpoint::ChatCompletions,
            input_file_id: "file-1".into(),
            completion_window: "24h".into(),
            window_s: 86_400,
            metadata: None,
        };
        BatchRecord::new("batch-1".into(), new, 1)
    }
}
