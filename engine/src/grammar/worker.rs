//! The mask worker: a thread that computes the next token masks of a step's constrained
//! sequences while the engine thread runs that step's forward pass, so constrained decoding
//! adds to a step only what the masks take beyond the forward (nothing, while they are
//! shorter). One batch of jobs is in flight at a time: the engine submits before the forward
//! and collects after it.

use std::sync::mpsc::{Receiver, Sender, channel};

use super::{Constraint, GrammarError, TokenMask};

/// One sequence's constraint, lent to the worker for a step.
#[derive(Debug)]
pub struct MaskJob {
    /// The engine's id of the sequence.
    pub id: u64,
    pub constraint: Constraint,
}

/// A job back from the worker, with the mask for the sequence's next token.
pub type MaskResult = (MaskJob, Result<TokenMask, GrammarError>);

/// The worker thread and its two channels.
#[derive(Debug)]
pub struct MaskWorker {
    jobs: Sender<Vec<MaskJob>>,
    results: Receiver<Vec<MaskResult>>,
}

impl MaskWorker {
    /// Starts the worker thread (it ends when the worker is dropped).
    pub fn spawn() -> std::io::Result<Self> {
        let (jobs, inbox) = channel::<Vec<MaskJob>>();
        let (outbox, results) = channel();
        std::thread::Builder::new()
            .name("grammar-masks".into())
            .spawn(move || {
                for batch in inbox {
                    let done: Vec<MaskResult> = batch
                        .into_iter()
                        .map(|mut job| {
                            let mask = job.constraint.next_mask();
                            (job, mask)
                        })
                        .collect();
                    if outbox.send(done).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Self { jobs, results })
    }

    /// Starts computing masks for `batch`; returns at once.
    pub fn submit(&self, batch: Vec<MaskJob>) -> Result<(), GrammarError> {
        self.jobs
            .send(batch)
            .map_err(|_| GrammarError::Runtime("the mask worker is gone".into()))
    }

    /// Waits for the batch submitted last.
    pub fn collect(&self) -> Result<Vec<MaskResult>, GrammarError> {
        self.results
            .recv()
            .map_err(|_| GrammarError::Runtime("the mask worker is gone".into()))
    }
}
