//! A cold start split into phases against a mocked API server: while a replica is starting
//! the decision lists the engine pods once, and the pod that turned ready last gives
//! `status.coldStartPhases` and `status.slowestStartPhase`.

// Shared with the other mocked-API tests; this file uses a part of it.
#[allow(dead_code)]
mod fixtures;

use fixtures::*;
use http::Method;
use serde_json::{Value, json};

/// A pod created at 10:00:00, scheduled at 10:00:12, its container started at 10:00:52 and
/// ready at 10:02:27 (when `ready`).
fn pod(name: &str, ready: bool) -> Value {
    let mut conditions = vec![
        json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T10:00:12Z"}),
        json!({"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T10:00:20Z"}),
    ];
    if ready {
        conditions.push(json!({"type": "ContainersReady", "status": "True",
                               "lastTransitionTime": "2026-01-01T10:02:27Z"}));
        conditions.push(json!({"type": "Ready", "status": "True",
                               "lastTransitionTime": "2026-01-01T10:02:27Z"}));
    }
    json!({
        "metadata": {"name": name, "namespace": NS, "creationTimestamp": "2026-01-01T10:00:00Z"},
        "status": {"conditions": conditions, "containerStatuses": [{
            "name": "engine", "image": "any", "imageID": "", "ready": ready, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T10:00:52Z"}}}]}
    })
}

#[tokio::test]
async fn a_starting_replica_lists_pods_once_and_status_names_the_slowest_phase() {
    let pods = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                      "items": [pod("llama-engine-a", true), pod("llama-engine-b", false)]});
    let get = |path, answer| step(Method::GET, path, 200, Answer::Json(answer));
    let apply = |path| step(Method::PATCH, path, 200, Answer::Echo);
    // Two replicas asked for, one ready: a start is pending, so the decision lists pods.
    let steps = vec![
        get(DEPLOYMENT, deployment(2, 1)),
        apply(DEPLOYMENT),
        apply(SERVICE),
        apply(PDB),
        get(DEPLOYMENT, deployment(2, 1)),
        get(PODS, pods),
        step(Method::PATCH, STATUS, 200, Answer::WithStatus),
    ];
    let (result, bodies, _) = run(md_any(), no_metrics(), Scenario::Steps(steps)).await;
    assert!(result.is_ok(), "{result:?}");
    let status = &bodies.last().expect("a status write")["status"];
    assert_eq!(
        status["coldStartPhases"],
        json!({"scheduling": "12s", "imagePull": "40s", "load": "95s"})
    );
    assert_eq!(status["slowestStartPhase"], "load");
}
