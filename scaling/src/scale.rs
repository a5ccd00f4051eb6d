//! Scale targets: what the autoscaler's decisions act on, behind one trait. The operator
//! implements it on the engine Deployment's `scale` subresource; `tokenscale up` on a local
//! process pool.

use std::future::Future;

use crate::autoscaler::ReplicaLoad;

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

    /// Before a scale-in by `count`: marks the `count` least-loaded replicas of `loads` so
    /// they are the ones that go, unmarks those of `marked_before` that stay (see
    /// [`removal_plan`]), and returns the names marked. Targets that remove one chosen
    /// replica at a time keep this default: the one least-loaded replica is marked.
    fn mark_many_for_removal(
        &self,
        loads: &[ReplicaLoad],
        count: u32,
        marked_before: &[String],
    ) -> impl Future<Output = Result<Vec<String>, ScaleError>> + Send {
        let _ = (count, marked_before);
        async move { Ok(self.mark_for_removal(loads).await?.into_iter().collect()) }
    }
}

/// Orders replicas from the first to remove to the last: fewest requests running plus
/// waiting, then lowest throughput, then name (deterministic). Removing the first kills the
/// fewest streams and drains the fastest.
fn removal_order(a: &ReplicaLoad, b: &ReplicaLoad) -> std::cmp::Ordering {
    (a.running_requests + a.waiting_requests)
        .cmp(&(b.running_requests + b.waiting_requests))
        .then(a.output_tokens_per_s.total_cmp(&b.output_tokens_per_s))
        .then(a.name.cmp(&b.name))
}

/// The least-loaded replica (the first in removal order).
pub fn least_loaded(loads: &[ReplicaLoad]) -> Option<&ReplicaLoad> {
    loads.iter().min_by(|a, b| removal_order(a, b))
}

/// What a scale-in by some count does to the replicas' removal marks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemovalPlan {
    /// Replicas to mark for removal, least loaded first.
    pub mark: Vec<String>,
    /// Replicas marked by an earlier scale-in that are still here and are not removed now:
    /// their mark must go, or they would be the first removed next time whatever their load.
    pub clear: Vec<String>,
}

/// The `count` least-loaded replicas of `loads` are marked; those of `marked_before` still
/// in `loads` and not chosen again are cleared. A mark on a replica no longer in `loads`
/// (removed, or not ready: not-ready pods are removed first anyway) is left alone.
pub fn removal_plan(loads: &[ReplicaLoad], count: u32, marked_before: &[String]) -> RemovalPlan {
    let mut ordered: Vec<&ReplicaLoad> = loads.iter().collect();
    ordered.sort_by(|a, b| removal_order(a, b));
    let take = usize::try_from(count).unwrap_or(usize::MAX);
    let mark: Vec<String> = ordered.iter().take(take).map(|l| l.name.clone()).collect();
    let clear = marked_before
        .iter()
        .filter(|name| !mark.contains(name) && loads.iter().any(|l| &l.name == *name))
        .cloned()
        .collect();
    RemovalPlan { mark, clear }
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

    #[test]
    fn plan_marks_the_k_least_loaded_and_clears_stale_marks_of_replicas_that_stay() {
        let loads = [
            load("a", 3, 0, 10.0),
            load("b", 1, 1, 50.0),
            load("c", 2, 0, 20.0),
            load("d", 0, 2, 5.0),
        ];
        let before = ["a".to_string(), "b".to_string(), "gone".to_string()];
        let plan = removal_plan(&loads, 2, &before);
        assert_eq!(
            plan.mark,
            ["d", "c"],
            "fewest requests, then lowest throughput"
        );
        assert_eq!(
            plan.clear,
            ["a", "b"],
            "stale marks of staying replicas go; a removed replica is left alone"
        );
        let again = removal_plan(&loads, 2, &plan.mark);
        assert!(
            again.clear.is_empty(),
            "a replica marked again keeps its mark"
        );
        let all = removal_plan(&loads, 9, &[]);
        assert_eq!(all.mark.len(), 4, "never more than there are");
        assert_eq!(removal_plan(&[], 2, &before), RemovalPlan::default());
    }
}
