//! How a new version replaces the replicas: the engine Deployment's rolling-update strategy
//! and the PodDisruptionBudget's bound, both from the spec's `rollout`, so a rollout and a
//! node drain take replicas down by the same measure.
//!
//! The default (`maxSurge: 0`, `maxUnavailable: 1`) never runs more pods than replicas: each
//! step stops one old replica and starts its successor on the GPU it freed. A surge needs a
//! GPU nobody holds; on a full cluster (the common case for GPUs) the surge pod stays Pending
//! and, with `maxUnavailable: 0`, the rollout never finishes.

use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::RolloutSpec;

/// The Deployment's rolling update, with the spec's bounds.
pub fn strategy(rollout: &RolloutSpec) -> DeploymentStrategy {
    DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(rollout.max_surge()),
            max_unavailable: Some(rollout.max_unavailable()),
        }),
    }
}

/// The PodDisruptionBudget's `maxUnavailable`: the rollout's, so a drain takes no more at
/// once than a rollout does; but at least one replica, as a budget of zero would block every
/// node drain (a one-replica model included) forever.
pub fn disruption_bound(rollout: &RolloutSpec) -> IntOrString {
    match resolve(&rollout.max_unavailable(), 100, false) {
        Ok(0) | Err(_) => IntOrString::Int(1),
        Ok(_) => rollout.max_unavailable(),
    }
}

/// `value` as a pod count for `replicas` replicas: a count as is, a percentage rounded up
/// (`maxSurge`) or down (`maxUnavailable`), as the Deployment controller does.
pub fn resolve(value: &IntOrString, replicas: i32, round_up: bool) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) if *n >= 0 => Ok(*n),
        IntOrString::Int(n) => Err(format!("must not be negative, got {n}")),
        IntOrString::String(text) => {
            let percent: i64 = text
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .filter(|p| (0..=100).contains(p))
                .ok_or_else(|| format!("must be a count or a percentage 0%..100%, got {text:?}"))?;
            let scaled = percent * i64::from(replicas.max(0));
            let count = if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            };
            Ok(i32::try_from(count).unwrap_or(i32::MAX))
        }
    }
}

/// The (surge, unavailable) a rollout of `replicas` runs with, as the Deployment controller
/// resolves them: when both come to zero it takes one replica down at a time.
pub fn bounds(rollout: &RolloutSpec, replicas: i32) -> Result<(i32, i32), String> {
    let surge = resolve(&rollout.max_surge(), replicas, true)?;
    let unavailable = resolve(&rollout.max_unavailable(), replicas, false)?;
    Ok(if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    })
}

/// Why `rollout` is invalid, if it is: `(field, message)`.
pub fn problem(rollout: &RolloutSpec) -> Option<(&'static str, String)> {
    if let Err(e) = resolve(&rollout.max_surge(), 1, true) {
        return Some(("rollout.maxSurge", e));
    }
    if let Err(e) = resolve(&rollout.max_unavailable(), 1, false) {
        return Some(("rollout.maxUnavailable", e));
    }
    let zero = |v: &IntOrString| resolve(v, 100, true) == Ok(0);
    if zero(&rollout.max_surge()) && zero(&rollout.max_unavailable()) {
        // Kubernetes refuses the pair: nothing could ever be replaced.
        return Some((
            "rollout",
            "maxSurge and maxUnavailable may not both be zero".into(),
        ));
    }
    None
}

#[cfg(test)]
mod tests;
