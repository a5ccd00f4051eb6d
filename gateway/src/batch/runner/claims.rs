//! The lines this pod works on, as a pure book: one event per step of a line's life here.
//!
//! A claimed line runs (counted against its model), then leaves: answered, given back or
//! stopped. A line refused for capacity counts a try; after [`MAX_TRIES`] it is given up
//! (answered as failed) instead of given back. A finished batch is forgotten. No I/O and no
//! locks: the runner keeps one book under one lock, and `H` is what stops a running line
//! (its task's abort handle).

use std::collections::BTreeMap;

/// A line refused for want of capacity (429, 502, 503, 504, a broken answer) goes back to
/// be claimed again; after this many tries it is answered as failed.
pub(super) const MAX_TRIES: u32 = 5;

/// One claim of a line on this pod. A line claimed again here (its lease lapsed while the
/// store was down, and this pod won it back) is a new claim: the old run leaving does not
/// take the new one's place in the book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClaimId(u64);

/// What a capacity refusal makes of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Give the line back, to be claimed again; `tries` refusals so far.
    GiveBack { tries: u32 },
    /// Answer the line as failed: it was refused `tries` times.
    GiveUp { tries: u32 },
}

/// A line running here: its claim and, once its task is started, what stops it.
#[derive(Debug)]
struct Running<H> {
    claim: ClaimId,
    handle: Option<H>,
}

/// One batch's lines here.
#[derive(Debug)]
struct BatchLines<H> {
    /// Running lines, by line index.
    running: BTreeMap<u32, Running<H>>,
    /// Capacity refusals so far, by line index (none: not refused).
    tries: BTreeMap<u32, u32>,
}

impl<H> Default for BatchLines<H> {
    fn default() -> Self {
        Self {
            running: BTreeMap::new(),
            tries: BTreeMap::new(),
        }
    }
}

impl<H> BatchLines<H> {
    fn is_empty(&self) -> bool {
        self.running.is_empty() && self.tries.is_empty()
    }
}

/// The lines this pod works on: running lines and tries by batch, lines in flight by model.
#[derive(Debug)]
pub(super) struct ClaimBook<H> {
    batches: BTreeMap<String, BatchLines<H>>,
    /// Running lines by model. A model stays listed at 0 once it ran, so its gauge reads 0
    /// rather than its last count.
    in_flight: BTreeMap<String, u64>,
    next_claim: u64,
}

impl<H> Default for ClaimBook<H> {
    fn default() -> Self {
        Self {
            batches: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            next_claim: 0,
        }
    }
}

impl<H> ClaimBook<H> {
    /// Line `index` of `batch`, claimed from the store, starts running here on `model`.
    pub(super) fn claim(&mut self, batch: &str, model: &str, index: u32) -> ClaimId {
        let claim = ClaimId(self.next_claim);
        self.next_claim += 1;
        let running = Running {
            claim,
            handle: None,
        };
        self.batch_mut(batch).running.insert(index, running);
        *self.in_flight.entry(model.to_string()).or_default() += 1;
        claim
    }

    /// The claim's task started: `handle` stops it. A claim no longer in the book (its
    /// line left, or its batch finished) takes nothing, and the handle comes back.
    pub(super) fn attach(
        &mut self,
        batch: &str,
        index: u32,
        claim: ClaimId,
        handle: H,
    ) -> Option<H> {
        let line = self
            .batches
            .get_mut(batch)
            .and_then(|lines| lines.running.get_mut(&index))
            .filter(|line| line.claim == claim);
        match line {
            Some(line) => {
                line.handle = Some(handle);
                None
            }
            None => Some(handle),
        }
    }

    /// The claim left (answered, given back or stopped): `model` has one line fewer, and
    /// the line is no longer running here unless a newer claim of it is.
    pub(super) fn left(&mut self, batch: &str, model: &str, index: u32, claim: ClaimId) {
        if let Some(lines) = self.batches.get_mut(batch) {
            if lines.running.get(&index).is_some_and(|l| l.claim == claim) {
                lines.running.remove(&index);
            }
            if lines.is_empty() {
                self.batches.remove(batch);
            }
        }
        if let Some(n) = self.in_flight.get_mut(model) {
            *n = n.saturating_sub(1);
        }
    }

    /// Line `index` of `batch` was refused for capacity once more.
    pub(super) fn refused(&mut self, batch: &str, index: u32) -> Refusal {
        let lines = self.batch_mut(batch);
        let tries = lines.tries.entry(index).or_default();
        *tries += 1;
        let tries = *tries;
        if tries < MAX_TRIES {
            return Refusal::GiveBack { tries };
        }
        lines.tries.remove(&index);
        if lines.is_empty() {
            self.batches.remove(batch);
        }
        Refusal::GiveUp { tries }
    }

    /// The batch ended (its files are written): its lines and tries are forgotten. Lines
    /// still running leave later, and count off their model then.
    pub(super) fn finished(&mut self, batch: &str) {
        self.batches.remove(batch);
    }

    /// Lines running here on `model`.
    pub(super) fn in_flight(&self, model: &str) -> u64 {
        self.in_flight.get(model).copied().unwrap_or(0)
    }

    /// Lines running here by model, for every model that ran one.
    pub(super) fn in_flight_by_model(&self) -> impl Iterator<Item = (&str, u64)> {
        self.in_flight.iter().map(|(model, n)| (model.as_str(), *n))
    }

    /// Whether a line of `batch` runs here.
    pub(super) fn runs_lines_of(&self, batch: &str) -> bool {
        self.batches
            .get(batch)
            .is_some_and(|lines| !lines.running.is_empty())
    }

    /// The running lines of `batch`, in index order.
    #[cfg(test)]
    pub(super) fn running(&self, batch: &str) -> Vec<u32> {
        self.batches
            .get(batch)
            .map(|lines| lines.running.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Every batch with a line running here and its running lines (whose leases to renew).
    pub(super) fn running_by_batch(&self) -> Vec<(String, Vec<u32>)> {
        self.batches
            .iter()
            .filter(|(_, lines)| !lines.running.is_empty())
            .map(|(id, lines)| (id.clone(), lines.running.keys().copied().collect()))
            .collect()
    }

    /// The batches with a line running here that `active` does not list (they ended
    /// elsewhere: another pod finalized them).
    pub(super) fn ended_elsewhere(&self, active: &[&str]) -> Vec<String> {
        self.batches
            .iter()
            .filter(|(id, lines)| !lines.running.is_empty() && !active.contains(&id.as_str()))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Refusals so far of line `index` of `batch`.
    #[cfg(test)]
    pub(super) fn tries(&self, batch: &str, index: u32) -> u32 {
        self.batches
            .get(batch)
            .and_then(|lines| lines.tries.get(&index))
            .copied()
            .unwrap_or(0)
    }

    fn batch_mut(&mut self, batch: &str) -> &mut BatchLines<H> {
        self.batches.entry(batch.to_string()).or_default()
    }
}

impl<H: Clone> ClaimBook<H> {
    /// What stops each running line of `batch` whose task started.
    pub(super) fn handles(&self, batch: &str) -> Vec<H> {
        self.batches
            .get(batch)
            .map(|lines| {
                lines
                    .running
                    .values()
                    .filter_map(|line| line.handle.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
