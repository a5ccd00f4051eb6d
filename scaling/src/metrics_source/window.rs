//! Windowed views of scraped metrics. Counters from many targets are folded into one
//! monotonic total per series (surviving pod restarts and pods coming and going), snapshots
//! of those totals are kept for the longest window, and rates and p95s are read as deltas
//! between the newest snapshot and the one a window earlier. All pure, no I/O.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::histogram::{Buckets, bucket_delta, quantile};

/// Key of one accumulated series: the metric name, plus `|le=<bound>` for a histogram bucket.
pub type SeriesKey = String;

/// The key of bucket `le` of histogram `name`.
pub fn bucket_key(name: &str, le: f64) -> SeriesKey {
    format!("{name}|le={le}")
}

/// Monotonic totals of one model at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Seconds on the caller's clock.
    pub t_s: f64,
    /// Accumulated counter and bucket totals.
    pub totals: BTreeMap<SeriesKey, f64>,
}

impl Snapshot {
    fn get(&self, key: &str) -> f64 {
        self.totals.get(key).copied().unwrap_or(0.0)
    }

    /// Cumulative buckets of histogram `name`, sorted by bound.
    pub fn buckets(&self, name: &str) -> Buckets {
        let prefix = format!("{name}|le=");
        let mut buckets: Buckets = self
            .totals
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(&prefix)
                    .and_then(|le| le.parse().ok())
                    .map(|le| (le, *v))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        buckets
    }
}

/// Folds counter readings of many targets into monotonic per-model totals.
#[derive(Debug, Clone, Default)]
pub struct Accumulator {
    /// Last raw reading per (target, series).
    last: HashMap<(String, SeriesKey), f64>,
    totals: BTreeMap<SeriesKey, f64>,
}

impl Accumulator {
    /// Adds one target's raw counter readings. A target's first reading only sets its
    /// baseline (what it counted before we looked is not this window's work); a reading below
    /// the last one means the target restarted, and counts from zero.
    pub fn add(&mut self, target: &str, readings: &BTreeMap<SeriesKey, f64>) {
        for (key, &value) in readings {
            if !value.is_finite() {
                continue;
            }
            let slot = (target.to_string(), key.clone());
            let increase = match self.last.insert(slot, value) {
                None => 0.0,
                Some(previous) if value >= previous => value - previous,
                Some(_) => value,
            };
            *self.totals.entry(key.clone()).or_insert(0.0) += increase;
        }
    }

    /// Forgets targets not in `alive` (pods that went away), so memory stays bounded.
    pub fn retain_targets(&mut self, alive: &[String]) {
        self.last.retain(|(target, _), _| alive.contains(target));
    }

    /// The current totals, stamped `t_s`.
    pub fn snapshot(&self, t_s: f64) -> Snapshot {
        Snapshot {
            t_s,
            totals: self.totals.clone(),
        }
    }
}

/// Snapshots over the longest window in use.
#[derive(Debug, Clone, Default)]
pub struct History {
    snapshots: VecDeque<Snapshot>,
}

impl History {
    /// Appends a snapshot and drops the ones older than `keep_s` before it (keeping one
    /// older snapshot as the window's baseline).
    pub fn push(&mut self, snapshot: Snapshot, keep_s: f64) {
        let cutoff = snapshot.t_s - keep_s;
        self.snapshots.push_back(snapshot);
        while self.snapshots.len() > 2 && self.snapshots.get(1).is_some_and(|s| s.t_s <= cutoff) {
            self.snapshots.pop_front();
        }
    }

    /// Number of snapshots kept.
    pub fn len(&self) -> usize {
        self.snapshots.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.snapshots.is_empty()
    }

    /// The newest snapshot and the baseline a window earlier: the newest one taken at or
    /// before `newest − window_s`, else the oldest (a partial window, early on).
    fn span(&self, window_s: f64) -> Option<(&Snapshot, &Snapshot)> {
        let newest = self.snapshots.back()?;
        let start = newest.t_s - window_s;
        let base = self
            .snapshots
            .iter()
            .rev()
            .find(|s| s.t_s <= start)
            .or(self.snapshots.front())?;
        (newest.t_s > base.t_s).then_some((newest, base))
    }

    /// Whether the newest snapshot has series `key` (some target exported it).
    pub fn has(&self, key: &str) -> bool {
        self.snapshots
            .back()
            .is_some_and(|s| s.totals.contains_key(key))
    }

    /// Per-second increase of `key` over the last `window_s`; `None` with under two snapshots.
    pub fn rate(&self, key: &str, window_s: f64) -> Option<f64> {
        let (newest, base) = self.span(window_s)?;
        Some((newest.get(key) - base.get(key)).max(0.0) / (newest.t_s - base.t_s))
    }

    /// Increase of `key` over the last `window_s`.
    pub fn increase(&self, key: &str, window_s: f64) -> Option<f64> {
        let (newest, base) = self.span(window_s)?;
        Some((newest.get(key) - base.get(key)).max(0.0))
    }

    /// The `q` quantile of histogram `name` over the last `window_s`; `None` when nothing was
    /// observed in the window.
    pub fn quantile(&self, name: &str, q: f64, window_s: f64) -> Option<f64> {
        let (newest, base) = self.span(window_s)?;
        quantile(q, &bucket_delta(&newest.buckets(name), &base.buckets(name)))
    }
}

#[cfg(test)]
mod tests;
