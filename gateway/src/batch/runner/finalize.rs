//! The finalizer: one pod takes a finalizing batch's `finalizer` lease, writes its output and
//! error files from the recorded results, and ends the batch (`completed`, `expired` or
//! `cancelled`). If that pod dies, another takes over after the lease and writes the same
//! files under the same ids.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::Runner;
use crate::batch::files::{WrittenUp, write_up};
use crate::batch::objects::ObjectError;
use crate::batch::state::{State, StateError};
use crate::batch::types::{
    BatchRecord, BatchStatus, Closing, FileMeta, LineResult, Progress, Purpose, now_ms, now_s,
    object_key,
};
use crate::batch::validate::Validated;

/// Whose turn it is to write a finalizing batch's files.
#[derive(Debug, PartialEq)]
enum Turn {
    /// Another live pod holds the finalizer lease.
    Elsewhere,
    /// This pod holds it already.
    Mine,
    /// Nobody holds it (or a lapsed or dead holder does): this record, with this pod as
    /// the finalizer, is to be written in its place.
    Take(Box<BatchRecord>),
}

/// The files a finalizer stored for a batch.
#[derive(Debug, PartialEq)]
struct Stored {
    output_id: String,
    /// None when no line failed.
    error_id: Option<String>,
    /// The final counts.
    progress: Progress,
}

impl Runner {
    /// Writes the output and error files of a finalizing batch and ends it.
    pub(super) async fn finalize(&self, batch: BatchRecord) -> Result<(), StateError> {
        let Some(batch) = self.take_finalizer(batch).await? else {
            return Ok(());
        };
        let closing = batch.closing.unwrap_or(Closing::Completed);
        let results = self.batches.state.results(&batch.id).await?;
        let results: HashMap<u32, LineResult> = results.into_iter().collect();
        let input = self.input_to_list(&batch).await;
        let lines = input.as_ref().map(|checked| &checked.lines[..]);
        let files = write_up(&batch, closing, &results, lines);
        let stored = self.store_files(&batch, files).await?;
        self.finish(ended(batch, closing, stored, now_s())).await
    }

    /// The batch as this pod holds its finalizer lease; `None` when another pod holds it
    /// (or took it first).
    async fn take_finalizer(&self, batch: BatchRecord) -> Result<Option<BatchRecord>, StateError> {
        // A local store has one gateway: a finalizer named there is this process or a
        // previous run of it (killed while writing), never a live peer.
        let shared = !matches!(self.batches.state, State::Local(_));
        let lease_ms = self.batches.lease().as_millis() as u64;
        match turn(&batch, &self.batches.pod, shared, now_ms(), lease_ms) {
            Turn::Elsewhere => Ok(None),
            Turn::Mine => Ok(Some(batch)),
            Turn::Take(taken) => {
                let taken = *taken;
                let won = self.batches.state.replace_batch(&taken).await?;
                Ok(won.then_some(taken))
            }
        }
    }

    /// The batch's lines, so the unanswered ones of an expired or cancelled batch are
    /// listed too; `None` for an empty batch, or when the input cannot be read.
    async fn input_to_list(&self, batch: &BatchRecord) -> Option<Arc<Validated>> {
        if batch.total == 0 {
            return None;
        }
        match self.validated(batch, false).await {
            Ok(lines) => Some(lines),
            Err(errors) => {
                let reason = errors.first().map_or(String::new(), |e| e.message.clone());
                tracing::warn!(batch = %batch.id, %reason, "finalizing without the input: unanswered lines are not listed");
                None
            }
        }
    }

    /// Stores the output file (always) and the error file (when a line failed), and their
    /// metadata. Ids follow from the batch id, so a second finalizer overwrites the same.
    async fn store_files(
        &self,
        batch: &BatchRecord,
        files: WrittenUp,
    ) -> Result<Stored, StateError> {
        let output_id = format!("file-{}-output", batch.id);
        let error_id = format!("file-{}-errors", batch.id);
        let objects = &self.batches.objects;
        let store = |e: ObjectError| StateError::Io(std::io::Error::other(e));
        objects
            .put(&object_key(&output_id), Bytes::from(files.output))
            .await
            .map_err(store)?;
        let mut metas = vec![(output_id.clone(), files.output_bytes, "output")];
        if files.errors_count > 0 {
            objects
                .put(&object_key(&error_id), Bytes::from(files.errors))
                .await
                .map_err(store)?;
            metas.push((error_id.clone(), files.errors_bytes, "errors"));
        }
        for (id, bytes, kind) in metas {
            let meta = FileMeta {
                id,
                tenant: batch.tenant.clone(),
                bytes,
                created_at: now_s(),
                filename: format!("{}_{kind}.jsonl", batch.id),
                purpose: Purpose::BatchOutput,
            };
            self.batches.state.put_file(&meta).await?;
        }
        Ok(Stored {
            output_id,
            error_id: (files.errors_count > 0).then_some(error_id),
            progress: files.progress,
        })
    }

    /// Writes the ended batch; the pod whose write wins forgets the batch's work.
    async fn finish(&self, done: BatchRecord) -> Result<(), StateError> {
        if !self.batches.state.replace_batch(&done).await? {
            return Ok(());
        }
        tracing::info!(
            batch = %done.id,
            status = done.status.as_str(),
            completed = done.progress.completed,
            failed = done.progress.failed,
            "batch finished"
        );
        self.batches.state.forget_work(&done.id).await?;
        self.ledger().forget(&done.id);
        Ok(())
    }
}

/// Whose turn it is to finalize `batch`, for pod `pod` at `now_ms`; `shared`: other
/// gateways use the same store.
fn turn(batch: &BatchRecord, pod: &str, shared: bool, now_ms: u64, lease_ms: u64) -> Turn {
    match &batch.finalizer {
        Some((holder, _)) if holder == pod => Turn::Mine,
        Some((_, until)) if shared && *until > now_ms => Turn::Elsewhere,
        _ => {
            let mut taken = batch.clone();
            taken.version += 1;
            taken.finalizer = Some((pod.to_string(), now_ms + lease_ms));
            Turn::Take(Box::new(taken))
        }
    }
}

/// The ended record of `batch`: its files, final counts, and end status at `at_s`.
fn ended(batch: BatchRecord, closing: Closing, stored: Stored, at_s: u64) -> BatchRecord {
    let mut done = batch;
    done.version += 1;
    done.finalizer = None;
    done.progress = stored.progress;
    done.output_file_id = Some(stored.output_id);
    done.error_file_id = stored.error_id;
    let at = Some(at_s);
    match closing {
        Closing::Completed => (done.status, done.completed_at) = (BatchStatus::Completed, at),
        Closing::Expired => (done.status, done.expired_at) = (BatchStatus::Expired, at),
        Closing::Cancelled => (done.status, done.cancelled_at) = (BatchStatus::Cancelled, at),
    }
    done
}

#[cfg(test)]
#[path = "finalize_tests.rs"]
mod tests;
