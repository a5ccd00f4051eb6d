//! The operator's own Prometheus metrics: reconciles, failures by reason, durations, scale
//! decisions, leadership, and the per-model gauges of [`ModelGauges`], written by
//! `tokenscale_common::exposition`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use tokenscale_common::exposition::{
    Counter, Family, Gauge, Histogram, Kind, LeFormat, Series, Value, render,
};
use tokenscale_common::metrics::operator as names;

use super::model_gauges::ModelGauges;
use crate::error::Error;

/// 1 ms to ~33 s: a reconcile is a handful of API calls plus one scrape round.
const DURATION_BUCKETS_S: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// All operator metrics.
pub struct Metrics {
    /// Reconciles started.
    pub reconciliations: Counter,
    /// Reconciles that failed, by `reason` ([`Error::metric_label`]).
    failures: Mutex<BTreeMap<String, u64>>,
    /// Reconcile durations, seconds.
    pub duration: Histogram,
    /// Replica changes made, by `(direction, reason)`.
    decisions: Mutex<BTreeMap<(String, String), u64>>,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    /// Per-model replicas, GPUs and SLO targets.
    pub models: ModelGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciliations: Counter::default(),
            failures: Mutex::default(),
            duration: Histogram::new(DURATION_BUCKETS_S, LeFormat::Decimal),
            decisions: Mutex::default(),
            leader: Gauge::default(),
            models: ModelGauges::default(),
        }
    }
}

/// Observes a reconcile's duration when dropped.
pub struct ReconcileTimer<'a> {
    start: Instant,
    histogram: &'a Histogram,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

impl Metrics {
    /// Counts a reconcile and times it until the returned guard drops.
    pub fn count_and_measure(&self) -> ReconcileTimer<'_> {
        self.reconciliations.inc();
        ReconcileTimer {
            start: Instant::now(),
            histogram: &self.duration,
        }
    }

    /// Counts a failed reconcile.
    pub fn reconcile_failure(&self, error: &Error) {
        *crate::controller::lock(&self.failures)
            .entry(error.metric_label())
            .or_default() += 1;
    }

    /// Counts a replica change.
    pub fn decision(&self, direction: &str, reason: &str) {
        let key = (direction.to_string(), reason.to_string());
        *crate::controller::lock(&self.decisions)
            .entry(key)
            .or_default() += 1;
    }

    /// Failures counted so far for `reason`.
    pub fn failures_for(&self, reason: &str) -> u64 {
        let failures = crate::controller::lock(&self.failures);
        failures.get(reason).copied().unwrap_or(0)
    }

    /// The text exposition of every metric, in the classic Prometheus text format 0.0.4.
    pub fn encode(&self) -> String {
        let failures: Vec<_> = crate::controller::lock(&self.failures)
            .iter()
            .map(|(reason, &n)| Series::new(vec![("reason", reason.clone())], n))
            .collect();
        let decisions: Vec<_> = crate::controller::lock(&self.decisions)
            .iter()
            .map(|((d, r), &n)| {
                Series::new(vec![("direction", d.clone()), ("reason", r.clone())], n)
            })
            .collect();
        let duration = Value::Histogram(self.duration.snapshot());
        let mut families = vec![
            Family::new(
                names::RECONCILIATIONS_TOTAL,
                Kind::Counter,
                "Reconciles started.",
                vec![Series::bare(self.reconciliations.get())],
            ),
            Family::new(
                names::RECONCILE_FAILURES_TOTAL,
                Kind::Counter,
                "Reconciles that failed, by reason.",
                failures,
            ),
            Family::new(
                names::RECONCILE_DURATION_SECONDS,
                Kind::Histogram,
                "Reconcile duration.",
                vec![Series::bare(duration)],
            ),
            Family::new(
                names::SCALE_DECISIONS_TOTAL,
                Kind::Counter,
                "Replica changes made, by direction and reason.",
                decisions,
            ),
            Family::new(
                names::LEADER,
                Kind::Gauge,
                "1 while this replica holds the leader lease.",
                vec![Series::bare(self.leader.get())],
            ),
        ];
        families.extend(self.models.families());
        render(&families)
    }
}
