//! Reconcile scenarios against a mocked API server (tower-test), in the style of
//! kube-rs/controller-rs `fixtures.rs`: an `ApiServerVerifier` answers the requests one
//! `Scenario` expects, in order, and records their bodies; each test runs in a timeout.

mod fixtures;

use std::sync::Arc;
use std::time::Duration;

use fixtures::*;
use http::Response;
use kube::client::Body;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use tokenscale_operator::autoscaler::PolicyState;
use tokenscale_operator::controller::apply::RESYNC;
use tokenscale_operator::controller::scaling::policy_spec;
use tokenscale_operator::controller::ticker::decide_due;
use tokenscale_operator::controller::{Context, error_policy, reconcile};
use tokenscale_operator::crd::ModelDeployment;
use tokenscale_operator::scaling::ScalingLoop;

#[tokio::test]
async fn create_applies_owned_children_and_writes_status() {
    let (result, bodies, _) = run(md("engine:v1"), no_metrics(), Scenario::Create).await;
    assert_eq!(result, Ok(Action::requeue(RESYNC)));
    // bodies[4] and [5]: the decision's reads (the Deployment, then the starting pods).
    let (deployment, service, pdb, status) = (&bodies[1], &bodies[2], &bodies[3], &bodies[6]);
    for child in [deployment, service, pdb] {
        let owner = &child["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["uid"].as_str()),
            (Some("ModelDeployment"), Some("uid-1"))
        );
        assert_eq!(owner["controller"], true);
    }
    assert_eq!(deployment["kind"], "Deployment");
    assert_eq!(
        deployment["spec"]["replicas"], 1,
        "a new Deployment starts at min"
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "engine:v1");
    assert_eq!(container["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        service["spec"]["selector"]["tokenscale.dev/model-deployment"],
        "llama"
    );
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    // Status: nothing ready yet, metrics missing, generation observed.
    let ready = condition(status, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("NoReplicaReady"))
    );
    assert_eq!(ready["observedGeneration"], 2);
    assert_eq!(condition(status, "SLOMet")["status"], "Unknown");
    assert_eq!(condition(status, "Scaling")["reason"], "HoldMissingMetrics");
    assert_eq!(status["status"]["desiredReplicas"], 1);
    assert_eq!(
        status["status"]["selector"],
        "app.kubernetes.io/name=tokenscale-engine,tokenscale.dev/model-deployment=llama"
    );
}

#[tokio::test]
async fn spec_change_is_reapplied_keeping_the_live_replica_count() {
    let (result, bodies, _) = run(
        md("engine:v2"),
        no_metrics(),
        Scenario::Existing { replicas: 3 },
    )
    .await;
    assert!(result.is_ok(), "{result:?}");
    let deployment = &bodies[1];
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "engine:v2"
    );
    assert_eq!(
        deployment["spec"]["replicas"], 3,
        "the scale subresource owns the count"
    );
    let ready = condition(&bodies[5], "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("ReplicasReady"))
    );
}

#[tokio::test]
async fn reconcile_is_idempotent() {
    let (_, first, _) = run(
        md("engine:v1"),
        no_metrics(),
        Scenario::Existing { replicas: 2 },
    )
    .await;
    let (_, second, _) = run(
        md("engine:v1"),
        no_metrics(),
        Scenario::Existing { replicas: 2 },
    )
    .await;
    assert_eq!(
        first[1..4],
        second[1..4],
        "the same object gives the same applied children"
    );
}

#[tokio::test]
async fn heavy_demand_scales_up_with_an_event_and_status() {
    let (result, bodies, _) = run(md("engine:v1"), heavy_demand(), Scenario::ScaleUp).await;
    assert!(result.is_ok(), "{result:?}");
    let scaled_to = bodies[5]["spec"]["replicas"].as_u64().unwrap_or(0);
    assert!(scaled_to > 1 && scaled_to <= 8, "scaled to {scaled_to}");
    let event = &bodies[6];
    assert_eq!(event["action"], "ScaleUp");
    assert!(
        event["note"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&format!("1 -> {scaled_to} replicas"))
    );
    assert_eq!(event["regarding"]["name"], "llama");
    let status = &bodies[7]["status"];
    assert_eq!(status["desiredReplicas"], scaled_to);
    assert_eq!(status["observed"]["tokensPerSecond"], 1000.0);
    assert_eq!(status["observed"]["ttftP95"], "900ms");
    assert_eq!(condition(&bodies[7], "SLOMet")["status"], "False");
    assert_eq!(condition(&bodies[7], "Scaling")["status"], "True");
}

#[tokio::test]
async fn conflict_errors_requeue_with_backoff_and_stop_before_other_writes() {
    let (result, bodies, errors) = run(
        md("engine:v1"),
        no_metrics(),
        Scenario::DeploymentApplyFails { code: 409 },
    )
    .await;
    let message = result.expect_err("a 409 fails the reconcile");
    assert!(
        message.contains("applying Deployment llama-engine"),
        "{message}"
    );
    assert_eq!(
        bodies.len(),
        2,
        "no Service, PDB or status after the failure"
    );
    assert_eq!(
        errors.requeue,
        Some(Action::requeue(Duration::from_secs(5)))
    );
    assert_eq!(errors.failures, ("conflict".to_string(), 2));
}

#[tokio::test]
async fn server_errors_requeue_and_leave_no_status_behind() {
    let (result, bodies, errors) =
        run(md("engine:v1"), no_metrics(), Scenario::ServiceApplyFails).await;
    assert!(result.is_err());
    assert_eq!(bodies.len(), 3);
    assert_eq!(errors.failures.0, "server_error");
    assert_eq!(
        errors.requeue,
        Some(Action::requeue(Duration::from_secs(5)))
    );
}

#[tokio::test]
async fn deletion_touches_nothing_and_garbage_collection_removes_children() {
    let mut deleting = md("engine:v1");
    deleting.metadata.deletion_timestamp =
        serde_json::from_value(json!("2026-01-01T00:00:00Z")).ok();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let (result, bodies, _) = run(deleting, no_metrics(), Scenario::RadioSilence).await;
    assert_eq!(result, Ok(Action::await_change()));
    assert!(bodies.is_empty());
}

#[tokio::test]
async fn invalid_spec_is_reported_in_status_and_not_retried_blindly() {
    let mut invalid = md("engine:v1");
    invalid.spec.replicas.min = 9;
    let md = Arc::new(invalid);
    // The only request is the status write.
    let (ctx2, verifier2) = context(no_metrics());
    let handle = tokio::spawn(async move {
        let mut h = verifier2.0;
        let (request, send) = h.next_request().await.expect("status write");
        assert_eq!(request.uri().path(), STATUS);
        let bytes = request.into_body().collect_bytes().await.expect("body");
        let body = serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null);
        let mut object = serde_json::to_value(md_any()).expect("json");
        object["status"] = body["status"].clone();
        send.send_response(
            Response::builder()
                .body(Body::from(serde_json::to_vec(&object).expect("json")))
                .expect("response"),
        );
        body
    });
    let result = tokio::time::timeout(Duration::from_secs(5), reconcile(md.clone(), ctx2.clone()))
        .await
        .expect("in time");
    let error = result.expect_err("invalid spec fails");
    assert_eq!(error_policy(md, &error, ctx2), Action::await_change());
    let status = tokio::time::timeout(Duration::from_secs(5), handle)
        .await
        .expect("in time")
        .expect("verifier");
    let ready = condition(&status, "Ready");
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("replicas.min (9) must be less than or equal to replicas.max (8)")
    );
}

#[tokio::test]
async fn a_second_reconcile_within_the_period_only_reapplies_children() {
    let (ctx, verifier) = context(no_metrics());
    let server = verifier.run_twice();
    let md = Arc::new(md("engine:v1"));
    let first = reconcile(md.clone(), ctx.clone())
        .await
        .expect("first reconcile");
    assert_eq!(first, Action::requeue(RESYNC));
    decide_due(&ctx).await;
    // The status write brings the object back: a reconcile, then the clock looks again.
    let second = reconcile(md.clone(), ctx.clone())
        .await
        .expect("second reconcile");
    assert_eq!(second, Action::requeue(RESYNC));
    decide_due(&ctx).await;
    assert!(
        ctx.not_due_for(&md).is_some(),
        "decided once; due again in a period"
    );
    drop(ctx);
    let bodies = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("in time")
        .expect("verifier");
    assert_eq!(
        bodies.len(),
        10,
        "GET + 3 applies, a decision's GET and status write, then GET + 3 applies only"
    );
}

#[tokio::test]
async fn idle_replicas_scale_in_draining_the_least_loaded_pod_first() {
    // The operator has watched this model for an hour: a freshly started policy holds its
    // replicas for a stable window before scaling in, for want of history.
    let seen_an_hour_ago = |ctx: &Context, md: &ModelDeployment| {
        let spec = policy_spec(&md.spec);
        let policy = PolicyState::new(&spec).seen_since(-3600.0);
        ctx.put_loop(
            md,
            ScalingLoop::resumed(spec, Some(policy), Default::default(), Vec::new()),
        );
    };
    let (result, bodies, _) = run_after(
        md("engine:v1"),
        idle(),
        Scenario::ScaleDown,
        seen_an_hour_ago,
    )
    .await;
    assert!(result.is_ok(), "{result:?}");
    let mark = &bodies[5];
    assert_eq!(
        mark["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"],
        "-1000000"
    );
    let scaled_to = bodies[6]["spec"]["replicas"].as_u64().unwrap_or(99);
    assert!((1..4).contains(&scaled_to), "scaled to {scaled_to}");
    let event = &bodies[7];
    assert_eq!(event["action"], "ScaleDown");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("(draining llama-engine-pod-c first)"),
        "{note}"
    );
    assert_eq!(bodies[8]["status"]["desiredReplicas"], scaled_to);
    // The commit the replicas report (their model info gauge) reaches the status.
    assert_eq!(
        bodies[8]["status"]["model"]["revision"],
        "0123456789abcdef0123456789abcdef01234567"
    );
}
