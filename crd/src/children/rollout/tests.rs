//! Tests of the rollout bounds, with a rolling update played out on a cluster whose GPUs the
//! replicas hold, all of them.

use super::*;
use crate::children::engine_deployment;
use crate::children::test_support::{CUDA_SPEC, md};

fn rollout(surge: IntOrString, unavailable: IntOrString) -> RolloutSpec {
    RolloutSpec {
        max_surge: Some(surge),
        max_unavailable: Some(unavailable),
    }
}

fn int(n: i32) -> IntOrString {
    IntOrString::Int(n)
}

fn percent(text: &str) -> IntOrString {
    IntOrString::String(text.into())
}

/// Plays a rolling update of `replicas` one-GPU replicas out as the Deployment controller
/// does, on a cluster with exactly `replicas` GPUs (no spare): each round it starts new pods
/// within `replicas + surge` (a pod without a free GPU stays Pending), then stops old ones
/// while `replicas - unavailable` stay ready, then the started pods turn ready. Returns the
/// most pods that existed at once, or `None` when a round changes nothing before every old
/// pod is replaced (the rollout stalls).
fn roll_on_a_full_cluster(replicas: i32, rollout: &RolloutSpec) -> Option<i32> {
    let (surge, unavailable) = bounds(rollout, replicas).expect("valid bounds");
    let gpus = replicas;
    let (mut old, mut new_ready, mut new_pending) = (replicas, 0, 0);
    let mut most_pods = replicas;
    for _ in 0..1000 {
        let before = (old, new_ready, new_pending);
        let room = (replicas + surge) - (old + new_ready + new_pending);
        let wanted = replicas - (new_ready + new_pending);
        new_pending += room.min(wanted).max(0);
        most_pods = most_pods.max(old + new_ready + new_pending);
        let removable = (old + new_ready) - (replicas - unavailable);
        old -= removable.clamp(0, old);
        // Pending pods get the GPUs the running ones leave free.
        let free = gpus - (old + new_ready);
        let scheduled = new_pending.min(free.max(0));
        new_ready += scheduled;
        new_pending -= scheduled;
        if old == 0 && new_ready == replicas {
            return Some(most_pods);
        }
        if (old, new_ready, new_pending) == before {
            return None;
        }
    }
    None
}

#[test]
fn the_default_rollout_completes_on_a_cluster_with_no_spare_gpu() {
    let default = RolloutSpec::default();
    for replicas in [1, 2, 3, 8, 50] {
        let (surge, _) = bounds(&default, replicas).expect("valid");
        assert_eq!(surge, 0, "never more pods than replicas");
        assert_eq!(
            roll_on_a_full_cluster(replicas, &default),
            Some(replicas),
            "{replicas} replicas: completes, never more pods than replicas"
        );
    }
}

#[test]
fn a_surge_without_unavailability_stalls_on_a_full_cluster() {
    // The old default: the surge pod waits for a GPU nobody frees.
    assert_eq!(roll_on_a_full_cluster(4, &rollout(int(1), int(0))), None);
    // With room to take replicas down, a surge completes too.
    assert_eq!(roll_on_a_full_cluster(4, &rollout(int(1), int(1))), Some(5));
    assert!(roll_on_a_full_cluster(8, &rollout(percent("25%"), percent("25%"))).is_some());
}

#[test]
fn percentages_round_as_kubernetes_does_and_zero_zero_takes_one() {
    let r = rollout(percent("10%"), percent("10%"));
    assert_eq!(bounds(&r, 15), Ok((2, 1)), "surge up, unavailable down");
    assert_eq!(bounds(&r, 5), Ok((1, 0)));
    assert_eq!(bounds(&rollout(int(0), percent("10%")), 5), Ok((0, 1)));
}

#[test]
fn bad_bounds_are_named() {
    let (field, message) = problem(&rollout(int(0), int(0))).expect("refused");
    assert_eq!(field, "rollout");
    assert!(message.contains("both be zero"), "{message}");
    let (field, message) = problem(&rollout(percent("lots"), int(1))).expect("refused");
    assert_eq!(field, "rollout.maxSurge");
    assert!(message.contains("\"lots\""), "{message}");
    assert_eq!(
        problem(&rollout(int(-1), int(1))).map(|p| p.0),
        Some("rollout.maxSurge")
    );
    assert_eq!(
        problem(&rollout(int(1), percent("120%"))).map(|p| p.0),
        Some("rollout.maxUnavailable")
    );
    assert_eq!(problem(&RolloutSpec::default()), None);
}

#[test]
fn the_deployment_and_the_pdb_take_the_same_replicas_down() {
    let spec = format!("{CUDA_SPEC}  rollout: {{maxSurge: 0, maxUnavailable: \"25%\"}}\n");
    let model = md(&spec);
    let deployment = engine_deployment(&model, 4).expect("builds");
    let update = deployment
        .spec
        .strategy
        .and_then(|s| s.rolling_update)
        .expect("rolling update");
    assert_eq!(update.max_surge, Some(int(0)));
    assert_eq!(update.max_unavailable, Some(percent("25%")));
    assert_eq!(disruption_bound(&model.spec.rollout), percent("25%"));
    // A surge-only rollout still lets a drain take one replica.
    assert_eq!(disruption_bound(&rollout(int(1), int(0))), int(1));
    assert_eq!(disruption_bound(&RolloutSpec::default()), int(1));
}
