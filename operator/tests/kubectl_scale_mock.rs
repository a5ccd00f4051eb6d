//! `kubectl scale md NAME --replicas N` against a mocked API server: the `scale` subresource
//! sets `spec.replicas.desired`, the operator holds that count whatever the policy would
//! decide and says autoscaling is paused; without it the policy decides again.

// Shared with the other mocked-API tests; this file uses a part of it.
#[allow(dead_code)]
mod fixtures;

use fixtures::*;
use kube::CustomResourceExt;
use serde_json::Value;
use tokenscale_operator::controller::status::AUTOSCALING_PAUSED;
use tokenscale_operator::crd::ModelDeployment;

/// The test model, with `desired` as a person's `kubectl scale` would leave it.
fn scaled(desired: Option<i32>) -> ModelDeployment {
    let mut md = md("engine:v1");
    md.spec.replicas.desired = desired;
    md
}

/// Reconciles and decides under heavy demand from one replica; returns the count the scale
/// subresource of the Deployment was patched to, the status written and the Event recorded.
async fn scale_up_under_load(md: ModelDeployment) -> (u64, Value, Value) {
    let (result, bodies, _) = run(md, heavy_demand(), Scenario::ScaleUp).await;
    assert!(result.is_ok(), "{result:?}");
    let scaled_to = bodies[5]["spec"]["replicas"].as_u64().unwrap_or(0);
    (scaled_to, bodies[7].clone(), bodies[6].clone())
}

#[tokio::test]
async fn a_scale_holds_the_count_and_pauses_autoscaling_until_it_is_removed() {
    let (held, status, event) = scale_up_under_load(scaled(Some(3))).await;
    assert_eq!(held, 3, "the count kubectl scale set, not the policy's");
    assert_eq!(status["status"]["desiredReplicas"], 3);
    let scaling = condition(&status, "Scaling");
    assert_eq!(scaling["reason"], AUTOSCALING_PAUSED);
    let message = scaling["message"].as_str().unwrap_or_default();
    assert!(message.contains("set to 3 by kubectl scale"), "{message}");
    assert!(
        message.contains(
            r#"kubectl patch md llama --type merge -p '{"spec":{"replicas":{"desired":null}}}'"#
        ),
        "{message}"
    );
    // The scale's Event is the person's, in the condition's words.
    assert_eq!(event["reason"], AUTOSCALING_PAUSED);
    assert_eq!(event["note"], format!("1 -> 3 replicas: {message}"));

    // Removed: the policy decides again (heavy demand wants more than 3).
    let (decided, status, event) = scale_up_under_load(scaled(None)).await;
    assert!(decided > 3, "the policy's count, got {decided}");
    assert_ne!(condition(&status, "Scaling")["reason"], AUTOSCALING_PAUSED);
    assert_ne!(event["reason"], AUTOSCALING_PAUSED);
}

#[test]
fn the_scale_subresource_is_the_held_count_not_the_floor() {
    let crd = serde_json::to_value(ModelDeployment::crd()).expect("json");
    let scale = &crd["spec"]["versions"][0]["subresources"]["scale"];
    assert_eq!(scale["specReplicasPath"], ".spec.replicas.desired");
    assert_eq!(scale["statusReplicasPath"], ".status.replicas");
}

#[test]
fn a_count_outside_the_bounds_is_refused_with_its_field() {
    let error = scaled(Some(9)).spec.validate().expect_err("refused");
    assert!(
        error.contains("spec.replicas.desired: 9 is outside"),
        "{error}"
    );
    assert!(scaled(Some(8)).spec.validate().is_ok());
}
