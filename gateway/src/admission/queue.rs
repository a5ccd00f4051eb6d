//! The admission queue's order: priority class first; within a class, the tenant holding the
//! fewest of the model's slots goes next (fair share), and each tenant's requests go in
//! arrival order. A request's deadline only decides when it gives up: a client that sets a
//! short `x-tokenscale-deadline-ms` cannot put itself ahead of anyone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hashbrown::HashMap;

use crate::vocab::Priority;

/// Position of a waiting request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueKey {
    /// Interactive before batch.
    pub priority: Priority,
    /// Arrival order (unique per pool).
    pub seq: u64,
    /// The tenant it is for.
    pub tenant: Arc<str>,
}

/// A bounded fair queue of waiters with removal by key (for expired or dropped waiters), and
/// the count of slots each tenant holds, which orders the tenants.
#[derive(Debug)]
pub struct WaitQueue<W> {
    entries: BTreeMap<QueueKey, (W, u64)>,
    /// Waiting arrival numbers by class and tenant.
    waiting: BTreeMap<(Priority, Arc<str>), BTreeSet<u64>>,
    /// Slots of the model each tenant holds now.
    held: HashMap<Arc<str>, usize>,
    queued_tokens: u64,
}

impl<W> Default for WaitQueue<W> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            waiting: BTreeMap::new(),
            held: HashMap::default(),
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

    /// The class of the waiter that goes next.
    pub fn next_class(&self) -> Option<Priority> {
        self.entries.keys().next().map(|key| key.priority)
    }

    /// Estimated tokens (prompt + reserved output) of everyone waiting.
    pub fn queued_tokens(&self) -> u64 {
        self.queued_tokens
    }

    /// Adds a waiter carrying `tokens` of demand.
    pub fn push(&mut self, key: QueueKey, waiter: W, tokens: u64) {
        self.queued_tokens += tokens;
        self.waiting
            .entry((key.priority, key.tenant.clone()))
            .or_default()
            .insert(key.seq);
        self.entries.insert(key, (waiter, tokens));
    }

    /// Takes the waiter that goes next: the highest class waiting; in it, the tenant holding
    /// the fewest slots (the earliest arrival among equals); its earliest request.
    pub fn pop(&mut self) -> Option<(QueueKey, W)> {
        let class = self.entries.keys().next()?.priority;
        let (tenant, seq) = self
            .waiting
            .range((class, Arc::from(""))..)
            .take_while(|((priority, _), _)| *priority == class)
            .filter_map(|((_, tenant), seqs)| Some((tenant, *seqs.first()?)))
            .min_by_key(|(tenant, seq)| (self.held.get(*tenant).copied().unwrap_or(0), *seq))
            .map(|(tenant, seq)| (tenant.clone(), seq))?;
        let key = QueueKey {
            priority: class,
            seq,
            tenant,
        };
        let waiter = self.remove(&key)?;
        Some((key, waiter))
    }

    /// Removes a waiter (it gave up); `None` if it already left.
    pub fn remove(&mut self, key: &QueueKey) -> Option<W> {
        let (waiter, tokens) = self.entries.remove(key)?;
        self.queued_tokens -= tokens;
        let class = (key.priority, key.tenant.clone());
        if let Some(seqs) = self.waiting.get_mut(&class) {
            seqs.remove(&key.seq);
            if seqs.is_empty() {
                self.waiting.remove(&class);
            }
        }
        Some(waiter)
    }

    /// `tenant` took one of the model's slots.
    pub fn hold(&mut self, tenant: &Arc<str>) {
        *self.held.entry(tenant.clone()).or_default() += 1;
    }

    /// `tenant` gave one of the model's slots back.
    pub fn release(&mut self, tenant: &Arc<str>) {
        if let Some(count) = self.held.get_mut(tenant) {
            *count -= 1;
            if *count == 0 {
                self.held.remove(tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(priority: Priority, seq: u64, tenant: &str) -> QueueKey {
        QueueKey {
            priority,
            seq,
            tenant: Arc::from(tenant),
        }
    }

    fn drain(queue: &mut WaitQueue<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| queue.pop().map(|(_, w)| w)).collect()
    }

    #[test]
    fn interactive_before_batch_then_arrival_order() {
        let mut queue = WaitQueue::default();
        queue.push(key(Priority::Batch, 0, "a"), "batch-early", 10);
        queue.push(key(Priority::Interactive, 1, "a"), "interactive-1", 20);
        queue.push(key(Priority::Interactive, 2, "a"), "interactive-2", 30);
        queue.push(key(Priority::Interactive, 3, "a"), "interactive-3", 40);
        assert_eq!(queue.queued_tokens(), 100);
        assert_eq!(
            queue.remove(&key(Priority::Interactive, 2, "a")),
            Some("interactive-2")
        );
        assert_eq!(queue.remove(&key(Priority::Interactive, 2, "a")), None);
        assert_eq!(
            drain(&mut queue),
            ["interactive-1", "interactive-3", "batch-early"]
        );
        assert_eq!(queue.queued_tokens(), 0);
        assert!(queue.is_empty());
    }

    #[test]
    fn the_tenant_holding_fewer_slots_goes_first_and_a_flood_cannot_starve_others() {
        let mut queue = WaitQueue::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        // `a` holds three slots and queued ten requests before `b` queued two.
        for _ in 0..3 {
            queue.hold(&a);
        }
        let names = ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9"];
        for (seq, name) in names.into_iter().enumerate() {
            queue.push(key(Priority::Interactive, seq as u64, "a"), name, 1);
        }
        queue.push(key(Priority::Interactive, 10, "b"), "b0", 1);
        queue.push(key(Priority::Interactive, 11, "b"), "b1", 1);
        // Every pop is admitted and holds its slot.
        let mut order = Vec::new();
        while let Some((key, waiter)) = queue.pop() {
            queue.hold(&key.tenant);
            order.push(waiter);
        }
        assert_eq!(&order[..4], ["b0", "b1", "a0", "a1"]);
        queue.release(&b);
        queue.release(&b);
        assert!(!queue.held.contains_key(&b));
    }

    #[test]
    fn equal_holders_alternate_by_arrival() {
        let mut queue = WaitQueue::default();
        queue.push(key(Priority::Interactive, 0, "a"), "a0", 1);
        queue.push(key(Priority::Interactive, 1, "a"), "a1", 1);
        queue.push(key(Priority::Interactive, 2, "b"), "b0", 1);
        queue.push(key(Priority::Interactive, 3, "b"), "b1", 1);
        let mut order = Vec::new();
        while let Some((key, waiter)) = queue.pop() {
            queue.hold(&key.tenant);
            order.push(waiter);
        }
        assert_eq!(order, ["a0", "b0", "a1", "b1"]);
    }
}
