//! Scale targets: what the autoscaler's decisions act on, behind one trait. Kubernetes uses
//! the engine Deployment's `scale` subresource; `tokenscale up` implements a local process
//! pool against the same trait.

pub mod kubernetes;

use std::future::Future;

use crate::autoscaler::ReplicaLoad;

pub use kubernetes::KubernetesScaleTarget;

/// Replica counts of a scale target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    /// Replicas asked for (the target's `spec.replicas`).
    pub desired: u32,
    /// Replicas that exist, ready or not.
    pub current: u32,
    /// Replicas that are ready to serve.
    pub ready: u32,
}

/// Why a scale target could not be read or changed.
#[derive(Debug, thiserror::Error)]
#[error("{action}: {message}")]
pub struct ScaleError {
    /// What was being done.
    pub action: String,
    /// What went wrong.
    pub message: String,
    /// The underlying error, when there is one.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// Something whose replica count the autoscaler sets.
pub trait ScaleTarget: Send + Sync {
    /// Current counts; `None` when the target does not exist (yet).
    fn replicas(&self) -> impl Future<Output = Result<Option<ReplicaCounts>, ScaleError>> + Send;

    /// Asks for `replicas` replicas.
    fn set_replicas(&self, replicas: u32) -> impl Future<Output = Result<(), ScaleError>> + Send;

    /// Before a scale-in: picks the replica to remove from `loads` (the least loaded), marks
    /// it so it is the one that goes, and returns its name. `None` when nothing could be
    /// picked (no loads known): the target's own ordering then applies.
    fn mark_for_removal(
        &self,
        loads: &[ReplicaLoad],
    ) -> impl Future<Output = Result<Option<String>, ScaleError>> + Send;
}

/// The least-loaded replica: fewest requests running plus waiting, then lowest throughput,
/// then name (deterministic). Removing it kills the fewest streams and drains the fastest.
pub fn least_loaded(loads: &[ReplicaLoad]) -> Option<&ReplicaLoad> {
    loads.iter().min_by(|a, b| {
        (a.running_requests + a.waiting_requests)
            .cmp(&(b.running_requests + b.waiting_requests))
            .then(a.output_tokens_per_s.total_cmp(&b.output_tokens_per_s))
            .then(a.name.cmp(&b.name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(name: &str, running: u64, waiting: u64, tokens_per_s: f64) -> ReplicaLoad {
        ReplicaLoad {
            name: name.into(),
            output_tokens_per_s: tokens_per_s,
            running_requests: running,
            waiting_requests: waiting,
            kv_cache_usage: 0.0,
        }
    }

    #[test]
    fn picks_fewest_requests_then_lowest_throughput_then_name() {
        let loads = [
            load("a", 3, 0, 10.0),
            load("b", 1, 1, 50.0),
            load("c", 2, 0, 20.0),
            load("d", 0, 2, 5.0),
        ];
        assert_eq!(least_loaded(&loads).map(|l| l.name.as_str()), Some("d"));
        let tied = [load("b", 1, 0, 9.0), load("a", 1, 0, 9.0)];
        assert_eq!(least_loaded(&tied).map(|l| l.name.as_str()), Some("a"));
        assert!(least_loaded(&[]).is_none());
    }
}
