//! A diagnostic record of the ticks taken on this thread, off unless a caller turns it on:
//! the simulator's analysis examples read which decision (and why) preceded each minute that
//! missed the SLO, without the simulator or the loop's callers carrying a log they never read.
//! Off, a tick costs one thread-local check.

use std::cell::RefCell;

use crate::autoscaler::DecisionReason;

/// One tick as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The loop's clock, seconds.
    pub now_s: f64,
    /// Replicas asked for before the tick, ready then, and asked for after it.
    pub desired_before: u32,
    pub ready: u32,
    pub target: u32,
    pub reason: DecisionReason,
    /// The demand planned for and the capacity of one replica, output tokens/s.
    pub demand_tokens_per_s: Option<f64>,
    pub capacity_tokens_per_s: Option<f64>,
    /// Requests waiting at the gateway when the tick was taken.
    pub queued_requests: u64,
    /// The lead time planned with, seconds.
    pub lead_time_s: f64,
}

thread_local! {
    static JOURNAL: RefCell<Option<Vec<Entry>>> = const { RefCell::new(None) };
}

/// Starts (or restarts, empty) recording the ticks taken on this thread.
pub fn start() {
    JOURNAL.with(|j| *j.borrow_mut() = Some(Vec::new()));
}

/// What was recorded since [`start`] (or the last take); recording goes on.
pub fn take() -> Vec<Entry> {
    JOURNAL.with(|j| {
        j.borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    })
}

/// Records `entry` if this thread records.
pub(super) fn note(entry: impl FnOnce() -> Entry) {
    JOURNAL.with(|j| {
        if let Some(entries) = j.borrow_mut().as_mut() {
            entries.push(entry());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(now_s: f64) -> Entry {
        Entry {
            now_s,
            desired_before: 1,
            ready: 1,
            target: 2,
            reason: DecisionReason::ScaleUp,
            demand_tokens_per_s: None,
            capacity_tokens_per_s: None,
            queued_requests: 0,
            lead_time_s: 60.0,
        }
    }

    #[test]
    fn records_only_once_started_and_take_empties_it() {
        note(|| entry(1.0));
        assert!(take().is_empty());
        start();
        note(|| entry(2.0));
        note(|| entry(3.0));
        let taken = take();
        assert_eq!(
            taken.iter().map(|e| e.now_s).collect::<Vec<_>>(),
            [2.0, 3.0]
        );
        assert!(take().is_empty());
    }
}
