//! `model.cache.fill` against a mocked API server: the fill Job is created once (an
//! existing one is only read), replicas wait for it (no Deployment until it has succeeded,
//! `Ready` says `CacheFilling`), a failed Job is a condition with its reason, and a
//! succeeded one lets the Deployment through with the claim mounted read-only.

#[allow(dead_code)]
mod fixtures;

use fixtures::*;
use http::Method;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use tokenscale_operator::children::cache::job_name;
use tokenscale_operator::controller::apply::RESYNC;
use tokenscale_operator::controller::fill::FILL_POLL;
use tokenscale_operator::crd::ModelDeployment;

const CLAIM: &str = "/api/v1/namespaces/testns/persistentvolumeclaims/llama-engine-cache";

fn filled() -> ModelDeployment {
    serde_json::from_value(json!({
        "apiVersion": "tokenscale.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "llama", "namespace": NS, "uid": "uid-1", "generation": 2},
        "spec": {
            "model": {"source": "hf://org/llama@main", "servedName": "llama-3",
                      "cache": {"fill": true, "size": "40Gi"}},
            "engine": {"kind": "vllm", "backend": "cuda", "gpusPerReplica": 1},
            "replicas": {"min": 1, "max": 8},
            "slo": {"ttftP95": "500ms", "tpotP95": "50ms"}
        }
    }))
    .expect("test object parses")
}

/// The fill Job's path (its name carries the source's hash).
fn job_path() -> &'static str {
    let path = format!(
        "/apis/batch/v1/namespaces/testns/jobs/{}",
        job_name(&filled())
    );
    Box::leak(path.into_boxed_str())
}

fn job(status: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": job_name(&filled()), "namespace": NS},
           "spec": {"template": {}}, "status": status})
}

fn patch(path: &'static str) -> Step {
    let answer = if path == STATUS {
        Answer::WithStatus
    } else {
        Answer::Echo
    };
    step(Method::PATCH, path, 200, answer)
}

fn get(path: &'static str, status: u16, answer: Value) -> Step {
    step(Method::GET, path, status, Answer::Json(answer))
}

#[tokio::test]
async fn the_first_reconcile_creates_the_job_and_no_deployment() {
    let steps = vec![
        patch(CLAIM),
        get(job_path(), 404, api_status(404, "NotFound")),
        patch(job_path()),
        patch(STATUS),
    ];
    let (result, bodies, _) = run(filled(), no_metrics(), Scenario::Steps(steps)).await;
    // The verifier saw no Deployment: replicas wait for the Job.
    assert_eq!(result, Ok(Action::requeue(FILL_POLL)));
    let (claim, job, status) = (&bodies[0], &bodies[2], &bodies[3]);
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "40Gi");
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteMany"]));
    let fill = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(fill["args"], json!(["pull", "hf://org/llama@main"]));
    assert_eq!(
        job["metadata"]["ownerReferences"][0]["kind"],
        "ModelDeployment"
    );
    let ready = condition(status, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("CacheFilling"))
    );
}

#[tokio::test]
async fn a_running_job_is_read_not_created_again_and_replicas_keep_waiting() {
    let steps = vec![
        patch(CLAIM),
        get(job_path(), 200, job(json!({"active": 1}))),
        patch(STATUS),
    ];
    let (result, bodies, _) = run(filled(), no_metrics(), Scenario::Steps(steps)).await;
    assert_eq!(result, Ok(Action::requeue(FILL_POLL)));
    assert_eq!(condition(&bodies[2], "Ready")["reason"], "CacheFilling");
}

#[tokio::test]
async fn a_failed_job_is_a_condition_with_its_reason() {
    let failed = json!({"failed": 5, "conditions": [{"type": "Failed", "status": "True",
        "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]});
    let steps = vec![
        patch(CLAIM),
        get(job_path(), 200, job(failed)),
        patch(STATUS),
    ];
    let (result, bodies, _) = run(filled(), no_metrics(), Scenario::Steps(steps)).await;
    assert_eq!(result, Ok(Action::requeue(RESYNC)));
    let ready = condition(&bodies[2], "Ready");
    assert_eq!(ready["reason"], "CacheFillFailed");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("BackoffLimitExceeded"), "{message}");
}

#[tokio::test]
async fn once_the_job_succeeded_the_replicas_start_on_the_read_only_claim() {
    let steps = vec![
        patch(CLAIM),
        get(job_path(), 200, job(json!({"succeeded": 1}))),
        get(DEPLOYMENT, 404, api_status(404, "NotFound")),
        patch(DEPLOYMENT),
        patch(SERVICE),
        patch(PDB),
        get(DEPLOYMENT, 200, deployment(1, 0)),
        // The replica is starting: the decision reads the pods' start phases.
        get(PODS, 200, pod_list()),
        patch(STATUS),
    ];
    let (result, bodies, _) = run(filled(), no_metrics(), Scenario::Steps(steps)).await;
    assert_eq!(result, Ok(Action::requeue(RESYNC)));
    let pod = &bodies[3]["spec"]["template"]["spec"];
    assert_eq!(bodies[3]["spec"]["replicas"], 1);
    let volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
    let claim = volumes
        .iter()
        .find_map(|v| v.get("persistentVolumeClaim"))
        .cloned();
    assert_eq!(
        claim,
        Some(json!({"claimName": "llama-engine-cache", "readOnly": true}))
    );
}
