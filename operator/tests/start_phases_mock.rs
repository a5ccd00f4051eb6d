//! A cold start split into phases against a mocked API server: while a replica is starting
//! the decision lists the engine pods once, and the pod that turned ready last gives
//! `status.coldStartPhases` and `status.slowestStartPhase`; where that pod's engine reports
//! its own start phases on `/metrics`, its `load` splits into fetch, load and warmup.

// Shared with the other mocked-API tests; this file uses a part of it.
#[allow(dead_code)]
mod fixtures;

use fixtures::*;
use http::Method;
use serde_json::{Value, json};
use tokenscale_operator::metrics_source::MetricsView;
use tokenscale_scaling::metrics_source::EngineStart;

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

/// The requests of one decision while a start is pending (two replicas asked for, one
/// ready): read the count, apply the children, read it again, list the pods once, write
/// status. Nothing else: the engine's own phases come with the scrape.
fn pending_start_steps() -> Vec<Step> {
    let pods = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                      "items": [pod("llama-engine-a", true), pod("llama-engine-b", false)]});
    let get = |path, answer| step(Method::GET, path, 200, Answer::Json(answer));
    let apply = |path| step(Method::PATCH, path, 200, Answer::Echo);
    vec![
        get(DEPLOYMENT, deployment(2, 1)),
        apply(DEPLOYMENT),
        apply(SERVICE),
        apply(PDB),
        get(DEPLOYMENT, deployment(2, 1)),
        get(PODS, pods),
        step(Method::PATCH, STATUS, 200, Answer::WithStatus),
    ]
}

#[tokio::test]
async fn a_starting_replica_lists_pods_once_and_status_names_the_slowest_phase() {
    let steps = pending_start_steps();
    let (result, bodies, _) = run(md_any(), no_metrics(), Scenario::Steps(steps)).await;
    assert!(result.is_ok(), "{result:?}");
    let status = &bodies.last().expect("a status write")["status"];
    assert_eq!(
        status["coldStartPhases"],
        json!({"scheduling": "12s", "imagePull": "40s", "load": "95s"})
    );
    assert_eq!(status["slowestStartPhase"], "load");
}

#[tokio::test]
async fn the_ready_pods_own_start_phases_split_its_load() {
    // The ready pod's engine exported fetch 60 s, load 20 s, warmup 4.5 s and ready 0.5 s;
    // the other one serves nothing yet.
    let start = EngineStart {
        fetch_s: 60.0,
        load_s: 20.0,
        warmup_s: 4.5,
        ready_s: 0.5,
    };
    let view = MetricsView {
        engine_starts: [("llama-engine-a".to_string(), start)].into(),
        ..no_metrics()
    };
    let (result, bodies, _) = run(md_any(), view, Scenario::Steps(pending_start_steps())).await;
    assert!(result.is_ok(), "{result:?}");
    let status = &bodies.last().expect("a status write")["status"];
    // The pod's 95 s from container start to Ready: 60 s fetch, 20 s load, 15 s the rest.
    assert_eq!(
        status["coldStartPhases"],
        json!({"scheduling": "12s", "imagePull": "40s", "fetch": "60s", "load": "20s",
               "warmup": "15s"})
    );
    assert_eq!(status["slowestStartPhase"], "fetch");
}
