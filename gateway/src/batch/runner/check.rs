//! A new batch's check: its input validated (and kept for the lines to run), the tenant's
//! enqueued-token limit applied, and the batch moved to `in_progress` or `failed`.

use std::sync::Arc;

use bytes::Bytes;

use super::Runner;
use crate::batch::state::StateError;
use crate::batch::types::{BatchRecord, BatchStatus, now_s, object_key};
use crate::batch::validate::{self, Line, LineError, Validated};

impl Runner {
    /// Validates a new batch's input: `in_progress`, or `failed` with every bad line.
    pub(super) async fn check(self: &Arc<Self>, batch: BatchRecord) -> Result<(), StateError> {
        let mut next = batch.clone();
        next.version += 1;
        match self.validated(&batch, true).await {
            Ok(checked) => {
                let lines = &checked.lines;
                if let Some(refusal) = self.over_token_limit(&batch, lines).await? {
                    fail(&mut next, vec![refusal]);
                } else {
                    next.status = BatchStatus::InProgress;
                    next.in_progress_at = Some(now_s());
                    next.total = lines.len() as u32;
                    next.reserved_output_tokens =
                        lines.iter().map(|l| l.reserved_output_tokens).sum();
                    next.estimated_prompt_tokens =
                        lines.iter().map(|l| l.estimated_prompt_tokens).sum();
                    next.model = Some(checked.model.clone());
                }
            }
            Err(errors) => fail(&mut next, errors),
        }
        if self.batches.state.replace_batch(&next).await? {
            tracing::info!(batch = %next.id, status = next.status.as_str(), lines = next.total, "batch checked");
            self.batches.wake.notify_one();
        }
        Ok(())
    }

    /// The tenant's `max_enqueued_tokens` refusal, when this batch would pass it.
    async fn over_token_limit(
        &self,
        batch: &BatchRecord,
        lines: &[Line],
    ) -> Result<Option<LineError>, StateError> {
        let Some(tenant) = self.tenants.by_name(&batch.tenant) else {
            return Ok(None);
        };
        let Some(limit) = tenant.batch.max_enqueued_tokens else {
            return Ok(None);
        };
        let mine: u64 = lines
            .iter()
            .map(|l| l.estimated_prompt_tokens + l.reserved_output_tokens)
            .sum();
        let mut enqueued = 0;
        for other in self.batches.state.active().await? {
            if other.tenant == batch.tenant && other.id != batch.id {
                let progress = self.batches.state.progress(&other.id).await?;
                let total = u64::from(other.total.max(1));
                let left = u64::from(other.total.saturating_sub(progress.answered()));
                enqueued +=
                    (other.estimated_prompt_tokens + other.reserved_output_tokens) * left / total;
            }
        }
        Ok((enqueued + mine > limit).then(|| LineError {
            code: "token_limit_exceeded".into(),
            message: format!(
                "Enqueued token limit reached for tenant `{}`: this batch has about {mine} tokens \
                 (prompt estimate plus max_tokens), {enqueued} are already enqueued, and the \
                 limit is {limit}. Wait for a batch to finish, or send a smaller one.",
                batch.tenant
            ),
            param: None,
            line: None,
        }))
    }

    /// The input file's bytes.
    async fn input_bytes(&self, batch: &BatchRecord) -> Result<Bytes, LineError> {
        self.batches
            .objects
            .get(&object_key(&batch.input_file_id))
            .await
            .map_err(|error| LineError {
                code: "file_not_found".into(),
                message: format!("input file `{}`: {error}", batch.input_file_id),
                param: Some("input_file_id".into()),
                line: None,
            })
    }

    /// The batch's checked lines (cached); `strict`: with the tenant's model access as it
    /// is now (at validation), else any model (a running batch keeps going).
    pub(super) async fn validated(
        &self,
        batch: &BatchRecord,
        strict: bool,
    ) -> Result<Arc<Validated>, Vec<LineError>> {
        if let Some(checked) = self.ledger().inputs.get(&batch.id) {
            return Ok(checked.clone());
        }
        let bytes = self.input_bytes(batch).await.map_err(|e| vec![e])?;
        let tenant = self.tenants.by_name(&batch.tenant);
        if strict && tenant.is_none() {
            return Err(vec![LineError {
                code: "invalid_tenant".into(),
                message: format!("tenant `{}` is no longer configured", batch.tenant),
                param: None,
                line: None,
            }]);
        }
        let (endpoint, limits, tokens) = (
            batch.endpoint,
            self.batches.validate_limits(),
            self.batches.tokens.clone(),
        );
        let checked = tokio::task::spawn_blocking(move || {
            let may_use =
                |model: &str| !strict || tenant.as_ref().is_some_and(|t| t.models.allows(model));
            validate::validate(&bytes, endpoint, &may_use, &limits, &tokens)
        })
        .await
        .map_err(|e| {
            vec![LineError {
                code: "internal_error".into(),
                message: e.to_string(),
                param: None,
                line: None,
            }]
        })??;
        let checked = Arc::new(checked);
        let mut ledger = self.ledger();
        ledger.inputs.insert(batch.id.clone(), checked.clone());
        Ok(checked)
    }
}

/// Marks a batch failed at validation with `errors`.
fn fail(batch: &mut BatchRecord, errors: Vec<LineError>) {
    batch.status = BatchStatus::Failed;
    batch.failed_at = Some(now_s());
    batch.errors = errors;
}
