//! The operator's own Prometheus metrics: reconciles, failures by reason, durations, scale
//! decisions, leadership, and the per-model gauges of [`ModelGauges`].

use std::time::Instant;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::model_gauges::ModelGauges;
use crate::error::Error;

type Labels = Vec<(String, String)>;

/// All operator metrics, registered in one registry.
pub struct Metrics {
    registry: Registry,
    /// Reconciles started.
    pub reconciliations: Counter,
    /// Reconciles that failed, by `reason` ([`Error::metric_label`]).
    pub failures: Family<Labels, Counter>,
    /// Reconcile durations, seconds.
    pub duration: Histogram,
    /// Replica changes made, by `direction` (up/down) and `reason`.
    pub decisions: Family<Labels, Counter>,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    /// Per-model replicas, GPUs and SLO targets.
    pub models: ModelGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tokenscale_operator");
        let reconciliations = Counter::default();
        let failures = Family::<Labels, Counter>::default();
        // 1 ms to ~33 s: a reconcile is a handful of API calls plus one scrape round.
        let duration = Histogram::new([
            0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ]);
        let decisions = Family::<Labels, Counter>::default();
        let leader = Gauge::default();
        registry.register(
            "reconciliations",
            "Reconciles started",
            reconciliations.clone(),
        );
        registry.register(
            "reconcile_failures",
            "Reconciles that failed, by reason",
            failures.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            duration.clone(),
        );
        registry.register(
            "scale_decisions",
            "Replica changes made, by direction and reason",
            decisions.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        let models = ModelGauges::default();
        models.register(&mut registry);
        Self {
            registry,
            reconciliations,
            failures,
            duration,
            decisions,
            leader,
            models,
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
        self.failures
            .get_or_create(&vec![("reason".into(), error.metric_label())])
            .inc();
    }

    /// Counts a replica change.
    pub fn decision(&self, direction: &str, reason: &str) {
        let labels = vec![
            ("direction".into(), direction.into()),
            ("reason".into(), reason.into()),
        ];
        self.decisions.get_or_create(&labels).inc();
    }

    /// Failures counted so far for `reason`.
    pub fn failures_for(&self, reason: &str) -> u64 {
        self.failures
            .get_or_create(&vec![("reason".into(), reason.into())])
            .get()
    }

    /// The text exposition of every metric, in the classic Prometheus text format 0.0.4.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        super::exposition::to_classic_text(&out)
    }
}
