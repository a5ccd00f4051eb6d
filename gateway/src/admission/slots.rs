//! `Slots`: a model's admitted count and queue, and the rules of who may take a slot. Pure:
//! the pool keeps it under the lock of its replicas, so capacity and count change together.

use std::sync::Arc;

use super::{QueueKey, WaitQueue};
use crate::vocab::Priority;

/// The slots of one model held on this pod, by class, and the requests waiting for one.
#[derive(Debug)]
pub struct Slots<W> {
    admitted: usize,
    /// Of `admitted`, requests of the `batch` class.
    admitted_batch: usize,
    queue: WaitQueue<W>,
    /// The last arrival number given to a waiter.
    seq: u64,
    /// Whether the model's engine frees batch-held slots for interactive work (see
    /// [`Self::has_room`]).
    batch_preempted: bool,
}

impl<W> Default for Slots<W> {
    fn default() -> Self {
        Self {
            admitted: 0,
            admitted_batch: 0,
            queue: WaitQueue::default(),
            seq: 0,
            batch_preempted: true,
        }
    }
}

impl<W> Slots<W> {
    /// Requests admitted and not finished.
    pub fn admitted(&self) -> usize {
        self.admitted
    }

    /// The requests waiting.
    pub fn queue(&self) -> &WaitQueue<W> {
        &self.queue
    }

    /// Says whether the model's engine preempts batch work for interactive work (ours, vLLM
    /// and SGLang with their priority scheduling) or not (the others: arrival order).
    pub fn set_batch_preempted(&mut self, preempted: bool) {
        self.batch_preempted = preempted;
    }

    /// Whether a request of `class` fits in `capacity` now. Batch work only takes slots
    /// nobody holds. Interactive work does not count the slots batch work holds where the
    /// engine schedules interactive requests first and preempts batch ones for them (a batch
    /// line never keeps an interactive request waiting here); where it does not, they count:
    /// the engine would otherwise run more requests at once than it was sized for.
    pub fn has_room(&self, class: Priority, capacity: usize) -> bool {
        let held = match class {
            Priority::Interactive if self.batch_preempted => self.admitted - self.admitted_batch,
            Priority::Interactive | Priority::Batch => self.admitted,
        };
        held < capacity
    }

    /// Whether a request of `class` goes in at once: nobody of its class or a higher one
    /// waits ahead of it, and it fits.
    pub fn admits_now(&self, class: Priority, capacity: usize) -> bool {
        let first = self
            .queue
            .next_class()
            .is_none_or(|waiting| waiting > class);
        first && self.has_room(class, capacity)
    }

    /// Counts a slot taken by `tenant` for a request of `class`.
    pub fn take(&mut self, tenant: &Arc<str>, class: Priority) {
        self.admitted += 1;
        if class == Priority::Batch {
            self.admitted_batch += 1;
        }
        self.queue.hold(tenant);
    }

    /// Gives back a slot [`Self::take`] counted.
    pub fn release(&mut self, tenant: &Arc<str>, class: Priority) {
        self.admitted -= 1;
        if class == Priority::Batch {
            self.admitted_batch -= 1;
        }
        self.queue.release(tenant);
    }

    /// Queues `waiter` of `class` for `tenant`, carrying `tokens` of demand; `None` when
    /// `max_queue` requests wait already.
    pub fn enqueue(
        &mut self,
        class: Priority,
        tenant: &Arc<str>,
        waiter: W,
        tokens: u64,
        max_queue: usize,
    ) -> Option<QueueKey> {
        if self.queue.len() >= max_queue {
            return None;
        }
        self.seq += 1;
        let key = QueueKey {
            priority: class,
            seq: self.seq,
            tenant: tenant.clone(),
        };
        self.queue.push(key.clone(), waiter, tokens);
        Some(key)
    }

    /// The waiter that goes next if it fits in `capacity`, its slot taken; `None` when nobody
    /// waits or the next one does not fit (queue order is kept: nobody overtakes it).
    pub fn next_admitted(&mut self, capacity: usize) -> Option<(QueueKey, W)> {
        let class = self.queue.next_class()?;
        if !self.has_room(class, capacity) {
            return None;
        }
        let (key, waiter) = self.queue.pop()?;
        self.take(&key.tenant, class);
        Some((key, waiter))
    }

    /// A waiter leaves the queue (its deadline passed, or its client went away).
    pub fn leave(&mut self, key: &QueueKey) {
        self.queue.remove(key);
    }

    /// How many more batch lines may start now: none while anyone waits (interactive
    /// requests go first), else up to `max_fill` of `capacity` minus those admitted; the
    /// rest stays free for interactive arrivals.
    pub fn batch_room(&self, capacity: usize, max_fill: f64) -> usize {
        if !self.queue.is_empty() {
            return 0;
        }
        // At least one slot where there is any: a model with one slot would never run a
        // batch otherwise (the engine still schedules interactive work first).
        let fill = ((capacity as f64 * max_fill).floor() as usize).max(capacity.min(1));
        fill.saturating_sub(self.admitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_are_admitted_in_queue_order_as_slots_free() {
        let mut slots: Slots<&str> = Slots::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        assert!(slots.admits_now(Priority::Interactive, 1));
        slots.take(&a, Priority::Interactive);
        assert!(!slots.admits_now(Priority::Interactive, 1));
        let batch = slots.enqueue(Priority::Batch, &b, "batch", 1, 8);
        slots.enqueue(Priority::Interactive, &b, "interactive", 1, 8);
        assert!(
            slots
                .enqueue(Priority::Interactive, &b, "third", 1, 2)
                .is_none()
        );
        assert_eq!(slots.next_admitted(1).map(|(_, w)| w), None);
        slots.release(&a, Priority::Interactive);
        assert_eq!(slots.next_admitted(1).map(|(_, w)| w), Some("interactive"));
        assert_eq!(slots.next_admitted(1).map(|(_, w)| w), None);
        slots.leave(&batch.expect("queued"));
        assert_eq!(slots.queue().len(), 0);
        assert_eq!(slots.admitted(), 1);
        assert_eq!(slots.batch_room(4, 0.5), 1);
    }

    #[test]
    fn batch_held_slots_count_for_interactive_work_only_where_the_engine_does_not_preempt() {
        let mut slots: Slots<&str> = Slots::default();
        let tenant: Arc<str> = Arc::from("t");
        slots.take(&tenant, Priority::Batch);
        slots.take(&tenant, Priority::Batch);
        // Preempting engine: the two batch lines give way, interactive work goes in.
        assert!(slots.admits_now(Priority::Interactive, 2));
        assert!(!slots.admits_now(Priority::Batch, 2));
        // Arrival-order engine: the lines hold their slots until they finish.
        slots.set_batch_preempted(false);
        assert!(!slots.admits_now(Priority::Interactive, 2));
        slots.enqueue(Priority::Interactive, &tenant, "interactive", 1, 8);
        assert_eq!(slots.next_admitted(2).map(|(_, w)| w), None);
        slots.release(&tenant, Priority::Batch);
        assert_eq!(slots.next_admitted(2).map(|(_, w)| w), Some("interactive"));
        assert_eq!(slots.admitted(), 2);
    }
}
