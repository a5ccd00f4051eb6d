//! Runs batches: every pod looks at the unfinished batches a few times a second, checks new
//! ones (`check`), claims lines while its models have room the interactive traffic leaves
//! (`dispatch`), sends each line down the batch stack (the same parse, admission, routing and
//! engines as interactive requests, in the `batch` class; `line`), records each answer once,
//! and writes the output and error files when a batch ends (done, expired or cancelled;
//! `finalize`). What runs here is kept in a pure book (`claims`) under one lock.

mod check;
mod claims;
mod dispatch;
mod finalize;
mod line;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;

use super::Batches;
use super::backlog::{self, Due};
use super::pacing::Pacing;
use super::state::StateError;
use super::types::{BatchRecord, BatchStatus, Closing, Progress, now_s};
use super::validate::Validated;
use crate::auth::TenantDirectory;
use crate::metrics::Metrics;
use crate::routing::{ModelPool, Router};
use crate::stack::BatchStack;
use claims::ClaimBook;

/// How often the runner looks at the batches when nothing wakes it.
const TICK: Duration = Duration::from_millis(250);

/// What runs the batches on one pod.
pub struct Runner {
    batches: Arc<Batches>,
    stack: BatchStack,
    router: Arc<Router>,
    tenants: Arc<TenantDirectory>,
    /// The interactive metrics, which pace batch lines.
    metrics: Arc<Metrics>,
    /// This pod's own work.
    ledger: Mutex<Ledger>,
}

/// What the runner knows of its own work on this pod, under one lock.
#[derive(Default)]
struct Ledger {
    /// Lines running here (and their tasks, to stop them), tries, lines per model.
    claims: ClaimBook<AbortHandle>,
    /// Checked input of the batches this pod works on, by batch id (read again after a
    /// restart).
    inputs: HashMap<String, Arc<Validated>>,
    /// Each model's pace, by model.
    paces: HashMap<String, Pacing>,
}

impl Ledger {
    /// A batch ended: nothing of it is kept (its lines still running count off on leaving).
    fn forget(&mut self, batch: &str) {
        self.claims.finished(batch);
        self.inputs.remove(batch);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runner {
    /// A runner sending lines down `stack` to the models of `router`.
    pub fn new(
        batches: Arc<Batches>,
        stack: BatchStack,
        router: Arc<Router>,
        tenants: Arc<TenantDirectory>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            batches,
            stack,
            router,
            tenants,
            metrics,
            ledger: Mutex::default(),
        })
    }

    /// The one lock over this pod's work; held briefly, never across an await.
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    /// Runs until the process ends.
    pub async fn run(self: Arc<Self>) {
        let renew_every = self.batches.lease() / 3;
        let mut renewed = tokio::time::Instant::now();
        let mut failing = false;
        loop {
            tokio::select! {
                () = self.batches.wake.notified() => {}
                () = tokio::time::sleep(TICK) => {}
            }
            if renewed.elapsed() >= renew_every {
                renewed = tokio::time::Instant::now();
                self.renew().await;
            }
            match self.tick().await {
                Ok(()) => failing = false,
                // Said once per outage, not four times a second.
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(%error, "batch runner: the batch state cannot be read");
                }
                Err(_) => {}
            }
        }
    }

    /// One look at every unfinished batch.
    async fn tick(self: &Arc<Self>) -> Result<(), StateError> {
        let active = self.batches.state.active().await?;
        // Lines of a batch that ended elsewhere (another pod finalized it) stop here too.
        let ids: Vec<&str> = active.iter().map(|b| b.id.as_str()).collect();
        let ended = self.ledger().claims.ended_elsewhere(&ids);
        for id in ended {
            self.stop_lines(&id);
        }
        let mut statuses: HashMap<BatchStatus, u64> = HashMap::new();
        let mut due = Vec::new();
        for batch in active {
            *statuses.entry(batch.status).or_default() += 1;
            let progress = match batch.status {
                BatchStatus::InProgress => self.batches.state.progress(&batch.id).await?,
                _ => Progress::default(),
            };
            if batch.status == BatchStatus::InProgress
                && let Some(model) = &batch.model
            {
                due.push(Due {
                    model: model.clone(),
                    tokens: batch.backlog_output_tokens(progress.answered()),
                    deadline_s: batch.expires_at,
                    window_s: batch.window_s,
                });
            }
            let id = batch.id.clone();
            if let Err(error) = self.step(batch, progress).await {
                tracing::warn!(batch = %id, %error, "batch runner: a step failed; retried");
            }
        }
        self.publish(statuses, &due);
        Ok(())
    }

    /// Rolls every routed model's pace and sets the runner's gauges.
    fn publish(&self, statuses: HashMap<BatchStatus, u64>, due: &[Due]) {
        let in_flight: Vec<(String, u64)> = {
            let mut ledger = self.ledger();
            // Every routed model's pace follows its interactive latency all the time, so a
            // batch that starts finds the baseline already measured.
            for pool in self.router.pools() {
                let mine = ledger.claims.in_flight(&pool.name);
                self.pace_of(&mut ledger, &pool.name, &pool, mine);
            }
            let by_model = ledger.claims.in_flight_by_model();
            by_model.map(|(model, n)| (model.to_string(), n)).collect()
        };
        let metrics = &self.batches.metrics;
        metrics.set_statuses(statuses);
        metrics.set_backlog(backlog::required(now_s(), due));
        for (model, n) in in_flight {
            metrics.set_in_flight(&model, n);
        }
    }

    /// Advances one batch as far as it can go now.
    async fn step(
        self: &Arc<Self>,
        batch: BatchRecord,
        progress: Progress,
    ) -> Result<(), StateError> {
        match batch.status {
            BatchStatus::Validating => self.check(batch).await,
            BatchStatus::InProgress if now_s() >= batch.expires_at => {
                self.close(batch, Closing::Expired).await
            }
            BatchStatus::InProgress if progress.answered() >= batch.total => {
                self.close(batch, Closing::Completed).await
            }
            BatchStatus::InProgress => self.dispatch(&batch).await,
            BatchStatus::Cancelling => {
                let here = self.ledger().claims.runs_lines_of(&batch.id);
                if !here && self.batches.state.leased(&batch.id).await? == 0 {
                    self.close(batch, Closing::Cancelled).await?;
                }
                Ok(())
            }
            BatchStatus::Finalizing => {
                // An expired batch's running lines are stopped: their answers would not be
                // written, and they hold slots other work could use. (Cancel lets them
                // finish, as OpenAI's does.)
                if batch.closing == Some(Closing::Expired) {
                    self.stop_lines(&batch.id);
                }
                self.finalize(batch).await
            }
            _ => Ok(()),
        }
    }

    /// Stops the lines of batch `id` running here (dropping a request closes its upstream
    /// connection, which stops its generation). Outside the lock: a stopped line leaves
    /// the book as its task ends.
    fn stop_lines(&self, id: &str) {
        let handles = self.ledger().claims.handles(id);
        for handle in handles {
            handle.abort();
        }
    }

    /// Moves a batch to `finalizing`, to end as `closing` says.
    async fn close(&self, batch: BatchRecord, closing: Closing) -> Result<(), StateError> {
        let mut next = batch;
        next.version += 1;
        next.status = BatchStatus::Finalizing;
        next.closing = Some(closing);
        next.finalizing_at = Some(now_s());
        if self.batches.state.replace_batch(&next).await? {
            self.batches.wake.notify_one();
        }
        Ok(())
    }

    /// The model's pace after taking the interval that may have ended into account.
    fn pace_of(&self, ledger: &mut Ledger, model: &str, pool: &ModelPool, mine: u64) -> u32 {
        let most = self.batches.config.max_concurrency;
        let interactive = self.metrics.model(model);
        let pacing = ledger.paces.entry(model.to_string()).or_insert_with(|| {
            // Requests admitted beyond this pod's batch lines are interactive ones.
            let admitted = pool.snapshot().admitted as u64;
            Pacing::start(&interactive, mine > 0, admitted > mine, most)
        });
        pacing.roll(&interactive, mine > 0, most);
        pacing.pace.limit()
    }

    /// Extends the leases of the lines running here (a line may run longer than a lease).
    async fn renew(&self) {
        let running = self.ledger().claims.running_by_batch();
        for (id, lines) in running {
            let renewed = self
                .batches
                .state
                .renew(&id, &self.batches.pod, &lines, self.batches.lease())
                .await;
            if let Err(error) = renewed {
                tracing::warn!(batch = %id, %error, "batch runner: leases could not be renewed");
            }
        }
    }
}
