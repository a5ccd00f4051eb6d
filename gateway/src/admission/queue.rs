//! The admission queue's order: priority class first, then the earliest deadline, then arrival.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::request::Priority;

/// Position of a waiting request: compared field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueKey {
    /// Interactive before batch.
    pub priority: Priority,
    /// Earlier deadlines first within a class.
    pub deadline: Instant,
    /// Arrival order breaks ties (and makes keys unique).
    pub seq: u64,
}

/// A bounded priority queue of waiters with removal by key (for expired waiters).
#[derive(Debug)]
pub struct WaitQueue<W> {
    entries: BTreeMap<QueueKey, (W, u64)>,
    queued_tokens: u64,
}

impl<W> Default for WaitQueue<W> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            queued_tokens: 0,
        }
    }
}

impl<W> WaitQueue<W> {
    /// Waiting requests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Estimated tokens (prompt + reserved output) of everyone waiting.
    pub fn queued_tokens(&self) -> u64 {
        self.queued_tokens
    }

    /// Adds a waiter carrying `tokens` of demand.
    pub fn push(&mut self, key: QueueKey, waiter: W, tokens: u64) {
        self.queued_tokens += tokens;
        self.entries.insert(key, (waiter, tokens));
    }

    /// Takes the waiter that goes next.
    pub fn pop(&mut self) -> Option<(QueueKey, W)> {
        let (key, (waiter, tokens)) = self.entries.pop_first()?;
        self.queued_tokens -= tokens;
        Some((key, waiter))
    }

    /// Removes a waiter (its deadline passed); `None` if it already left.
    pub fn remove(&mut self, key: &QueueKey) -> Option<W> {
        let (waiter, tokens) = self.entries.remove(key)?;
        self.queued_tokens -= tokens;
        Some(waiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn interactive_before_batch_then_deadline_then_arrival() {
        let now = Instant::now();
        let key = |priority, deadline_s, seq| QueueKey {
            priority,
            deadline: now + Duration::from_secs(deadline_s),
            seq,
        };
        let mut queue = WaitQueue::default();
        queue.push(key(Priority::Batch, 1, 0), "batch-early", 10);
        queue.push(key(Priority::Interactive, 30, 1), "interactive-late", 20);
        queue.push(key(Priority::Interactive, 5, 2), "interactive-early", 30);
        queue.push(
            key(Priority::Interactive, 5, 3),
            "interactive-early-second",
            40,
        );
        assert_eq!(queue.queued_tokens(), 100);
        assert_eq!(
            queue.remove(&key(Priority::Interactive, 30, 1)),
            Some("interactive-late")
        );
        assert_eq!(queue.remove(&key(Priority::Interactive, 30, 1)), None);
        let order: Vec<_> = std::iter::from_fn(|| queue.pop().map(|(_, w)| w)).collect();
        assert_eq!(
            order,
            [
                "interactive-early",
                "interactive-early-second",
                "batch-early"
            ]
        );
        assert_eq!(queue.queued_tokens(), 0);
        assert!(queue.is_empty());
    }
}
