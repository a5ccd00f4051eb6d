//! The dispatch shell: claims a running batch's lines while its model has room, starts each
//! as a task whose slot in the claim book it leaves on ending, and records each answer once
//! (or gives the line back, or gives it up after its last try).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::Runner;
use super::claims::{ClaimId, Refusal};
use super::line::{Job, Sent, error_result};
use crate::batch::state::StateError;
use crate::batch::types::{BatchRecord, LineResult};
use crate::batch::validate::Line;
use crate::routing::ModelPool;

/// Most lines claimed in one go (per batch, per tick).
const CLAIM_AT_ONCE: u32 = 32;

impl Runner {
    /// Claims and starts lines while the model has room.
    pub(super) async fn dispatch(self: &Arc<Self>, batch: &BatchRecord) -> Result<(), StateError> {
        let Some(model) = batch.model.as_deref() else {
            return Ok(());
        };
        // A model this pod does not route: other pods (or a later config) run it.
        let Some(pool) = self.router.model(model) else {
            return Ok(());
        };
        let room = self.room(model, &pool);
        if room == 0 {
            return Ok(());
        }
        let checked = match self.validated(batch, false).await {
            Ok(checked) => checked,
            Err(errors) => {
                let reason = errors.first().map_or(String::new(), |e| e.message.clone());
                tracing::warn!(batch = %batch.id, %reason, "batch runner: the input cannot be read");
                return Ok(());
            }
        };
        if let Some(pacing) = self.ledger().paces.get_mut(model) {
            pacing.batch_ran = true;
        }
        let (pod, lease) = (&self.batches.pod, self.batches.lease());
        let max = room.min(CLAIM_AT_ONCE);
        let state = &self.batches.state;
        let claimed = state.claim(&batch.id, batch.total, max, pod, lease).await?;
        for index in claimed {
            if let Some(line) = checked.lines.get(index as usize) {
                self.start_line(batch, model, index, line);
            }
        }
        Ok(())
    }

    /// Lines the model can take from this pod now: the fewest of its batch room (what
    /// interactive traffic leaves), the configured most and the pace, less what runs here.
    fn room(&self, model: &str, pool: &ModelPool) -> u32 {
        let most = self.batches.config.max_concurrency;
        let (mine, paced) = {
            let mut ledger = self.ledger();
            let mine = ledger.claims.in_flight(model);
            (mine, self.pace_of(&mut ledger, model, pool, mine))
        };
        self.batches.metrics.set_pace(model, paced);
        let cap = u64::from(most.min(paced)).saturating_sub(mine);
        let room = (pool.batch_room(self.batches.config.max_fill) as u64).min(cap);
        u32::try_from(room).unwrap_or(u32::MAX)
    }

    /// Starts a claimed line as its own task.
    fn start_line(self: &Arc<Self>, batch: &BatchRecord, model: &str, index: u32, line: &Line) {
        let job = Job {
            batch: batch.id.clone(),
            tenant: batch.tenant.clone(),
            model: model.to_string(),
            path: batch.endpoint.path(),
            index,
            custom_id: line.custom_id.clone(),
            body: Bytes::copy_from_slice(line.body.get().as_bytes()),
        };
        // Held across the spawn, so the line's slot (which takes the lock to leave) cannot
        // leave before its task is attached.
        let mut ledger = self.ledger();
        let claim = ledger.claims.claim(&batch.id, model, index);
        let slot = Slot {
            runner: self.clone(),
            batch: batch.id.clone(),
            model: model.to_string(),
            index,
            claim,
        };
        let task = tokio::spawn(self.clone().run_line(job, slot));
        // Always taken: the slot inside the task cannot have left yet.
        let _ = ledger
            .claims
            .attach(&batch.id, index, claim, task.abort_handle());
    }

    /// Runs one line and records its answer (or gives it back).
    async fn run_line(self: Arc<Self>, job: Job, _slot: Slot) {
        let reason = match self.send(&job).await {
            Sent::Answer(result) => return self.record(&job, result).await,
            Sent::Again(reason) => reason,
        };
        let refusal = self.ledger().claims.refused(&job.batch, job.index);
        match refusal {
            Refusal::GiveUp { tries } => {
                let message =
                    format!("No replica could take this request after {tries} tries: {reason}");
                let result = error_result(&job, "capacity_unavailable", &message);
                self.record(&job, result).await;
            }
            Refusal::GiveBack { .. } => {
                let state = &self.batches.state;
                if let Err(error) = state.release(&job.batch, &[job.index]).await {
                    // The lease runs out instead, and the line is claimed again then.
                    tracing::warn!(batch = %job.batch, %error, "batch runner: a line could not be given back");
                }
            }
        }
    }

    /// Records an answer, retrying while the store is down (the line's lease is renewed
    /// meanwhile, since it is still running in the book).
    async fn record(&self, job: &Job, result: LineResult) {
        let mut wait = Duration::from_millis(100);
        let state = &self.batches.state;
        for _ in 0..8 {
            match state.record(&job.batch, job.index, &result).await {
                Ok(first) => {
                    if first {
                        self.batches.metrics.answered(
                            &job.model,
                            &job.tenant,
                            result.ok,
                            result.prompt_tokens,
                            result.completion_tokens,
                        );
                    }
                    return;
                }
                Err(error) => {
                    tracing::warn!(batch = %job.batch, %error, "batch runner: an answer could not be recorded yet");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
        tracing::error!(batch = %job.batch, line = job.index, "batch runner: an answer was lost; the line runs again when its lease ends");
    }
}

/// A line running on this pod: leaving (answered, given back, or stopped) frees its place
/// in the claim book.
struct Slot {
    runner: Arc<Runner>,
    batch: String,
    model: String,
    index: u32,
    claim: ClaimId,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.runner
            .ledger()
            .claims
            .left(&self.batch, &self.model, self.index, self.claim);
    }
}
