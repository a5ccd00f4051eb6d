//! Capacity read at the concurrency cap (the knee) instead of found by breaking the SLO: a
//! replica that holds its TPOT target by capping its own batch (our engine's
//! `tokenscale_engine_max_num_seqs` under `--tpot-target`), or whose in-flight requests the
//! gateway caps (`tokenscale_gateway_replica_concurrency_limit`), delivers at that cap, with
//! requests waiting, exactly what it sustains within the target.

use super::observations::Demand;

/// Smoothing: each period at the cap moves the estimate this share of the way to what the
/// replicas deliver there (one short window is noisy; a few agree).
pub const KNEE_GAIN: f64 = 0.5;
/// A replica counts as at its cap from this share of it: the gauges are sampled between a
/// sequence finishing and the next one admitted.
pub const AT_CAP_SHARE: f64 = 0.9;

/// Who set the cap a model's replicas report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CapSource {
    /// The engine's own limit on running sequences (`tokenscale_engine_max_num_seqs`).
    #[default]
    Engine,
    /// The gateway's adaptive in-flight cap per replica
    /// (`tokenscale_gateway_replica_concurrency_limit`), for engines we do not control.
    Gateway,
}

impl CapSource {
    /// The name status shows.
    pub fn as_str(self) -> &'static str {
        match self {
            CapSource::Engine => "engine",
            CapSource::Gateway => "gateway",
        }
    }
}

/// A model's concurrency caps, reduced over the replicas that report one.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ConcurrencyCap {
    /// Who set it.
    pub source: CapSource,
    /// Replicas that report a cap.
    pub replicas: u32,
    /// Their mean cap (sequences, or requests in flight), per replica.
    pub per_replica: f64,
    /// Their mean sequences running (or requests in flight), per replica.
    pub in_use_per_replica: f64,
    /// How many of them run at their cap now.
    pub at_cap: u32,
}

impl ConcurrencyCap {
    /// One replica's cap and what it runs against it.
    pub fn one(source: CapSource, limit: f64, in_use: f64) -> Self {
        Self {
            source,
            replicas: 1,
            per_replica: limit,
            in_use_per_replica: in_use,
            at_cap: u32::from(limit > 0.0 && in_use >= AT_CAP_SHARE * limit),
        }
    }

    /// Folds another replica's (or group's) caps in.
    pub fn merge(self, other: ConcurrencyCap) -> Self {
        let n = self.replicas + other.replicas;
        let mean = |a: f64, b: f64| {
            (a * f64::from(self.replicas) + b * f64::from(other.replicas)) / f64::from(n.max(1))
        };
        Self {
            source: self.source,
            replicas: n,
            per_replica: mean(self.per_replica, other.per_replica),
            in_use_per_replica: mean(self.in_use_per_replica, other.in_use_per_replica),
            at_cap: self.at_cap + other.at_cap,
        }
    }

    /// Whether every replica reporting a cap runs at it.
    pub fn all_at_cap(&self) -> bool {
        self.replicas > 0 && self.at_cap >= self.replicas
    }
}

/// Per-replica output tokens/s delivered at the cap this period, when the replicas show their
/// knee: every one reporting a cap runs at it, requests wait beyond it (the cap binds, not the
/// demand), and the TPOT p95 holds its target (a cap that does not hold the target, e.g. a
/// plain `--max-num-seqs`, is no knee: the SLO rules decide then). `None` otherwise: a
/// replica below its cap says nothing about where the cap is.
pub fn knee_tokens_per_s(
    cap: Option<&ConcurrencyCap>,
    demand: &Demand,
    ready: u32,
    tpot_ratio: Option<f64>,
) -> Option<f64> {
    let cap = cap?;
    let binding = cap.all_at_cap() && demand.queued_requests > 0;
    if ready == 0 || !binding || tpot_ratio.is_some_and(|r| r > 1.0) {
        return None;
    }
    // Batch lines run inside the same cap: the replica's throughput there is both.
    let served = demand.output_tokens_per_s.panic + demand.batch.output_tokens_per_s.panic;
    let x = served / f64::from(ready);
    (x.is_finite() && x > 0.0).then_some(x)
}

/// The capacity after one period at the knee `x`: smoothed toward it, up or down.
pub fn learn_at_knee(current: Option<f64>, x: f64) -> f64 {
    current.map_or(x, |c| c + KNEE_GAIN * (x - c))
}

#[cfg(test)]
mod tests;
