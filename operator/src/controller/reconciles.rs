//! What reconcile keeps of its own about each model (keyed `namespace/name`): its write guard,
//! which it hands to the scaling clock with the object, and its consecutive failures, for
//! its backoff. The clock's state is the clock's ([`crate::clock`]); this is reconcile's.

use std::collections::HashMap;
use std::sync::Mutex;

use super::lock;
use crate::clock::WriteGuard;

/// Reconcile's book of models.
#[derive(Debug, Default)]
pub struct Reconciles {
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Debug, Default)]
struct Entry {
    guard: WriteGuard,
    failures: u32,
}

impl Reconciles {
    /// The write guard of the model under `key` (made the first time).
    pub fn guard(&self, key: &str) -> WriteGuard {
        lock(&self.entries)
            .entry(key.to_string())
            .or_default()
            .guard
            .clone()
    }

    /// Counts one more failed reconcile of `key`; returns how many in a row.
    pub fn failed(&self, key: &str) -> u32 {
        let mut entries = lock(&self.entries);
        let entry = entries.entry(key.to_string()).or_default();
        entry.failures += 1;
        entry.failures
    }

    /// A reconcile of `key` succeeded: its backoff starts over.
    pub fn succeeded(&self, key: &str) {
        if let Some(entry) = lock(&self.entries).get_mut(key) {
            entry.failures = 0;
        }
    }

    /// Forgets a deleted model.
    pub fn forget(&self, key: &str) {
        lock(&self.entries).remove(key);
    }
}
