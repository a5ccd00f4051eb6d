//! One owner per served name, against a mocked API server: a ModelDeployment reusing the
//! served name of an older one in another namespace, or claiming a name its namespace is not
//! given (`--served-names`), gets no children, only a status with a `Conflict` condition
//! saying why and a Warning Event.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tokenscale_operator::controller::{Context, Settings, reconcile};
use tokenscale_operator::crd::ModelDeployment;
use tokenscale_operator::metrics_source::{FixedSource, MetricsView};
use tokenscale_operator::telemetry::Metrics;
use tower_test::mock;

fn md(namespace: &str, name: &str, created: &str) -> ModelDeployment {
    serde_json::from_value(json!({
        "apiVersion": "tokenscale.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                     "generation": 1, "creationTimestamp": created},
        "spec": {
            "model": {"source": "pvc://weights/llama.gguf", "servedName": "llama-3"},
            "engine": {"image": "engine:v1", "backend": "cuda", "gpusPerReplica": 1},
            "replicas": {"min": 1, "max": 2},
            "slo": {"ttftP95": "500ms", "tpotP95": "50ms"}
        }
    }))
    .expect("test object parses")
}

/// Reconciles `md` against a mocked API server that expects exactly the status patch and the
/// Warning Event; returns the status written and the Event.
async fn refused(
    md: ModelDeployment,
    settings: Settings,
    cache: Vec<ModelDeployment>,
) -> (Value, Value) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Context::new(
        Client::new(service, "team-b"),
        Arc::new(Metrics::default()),
        Arc::new(FixedSource(MetricsView::default())),
        settings,
    );
    // The controller's cache of every deployment, listed.
    let (store, mut writer) = reflector::store::<ModelDeployment>();
    writer.apply_watcher_event(&Event::Init);
    for other in cache {
        writer.apply_watcher_event(&Event::InitApply(other));
    }
    writer.apply_watcher_event(&Event::InitDone);
    assert!(ctx.deployments.set(store).is_ok());
    let ctx = Arc::new(ctx);
    let mut answer = serde_json::to_value(&md).expect("json");
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("the status patch");
        assert_eq!(request.method(), Method::PATCH);
        assert_eq!(
            request.uri().path(),
            "/apis/tokenscale.dev/v1alpha1/namespaces/team-b/modeldeployments/mine/status",
            "only the status is written: no Deployment, Service or PDB"
        );
        let bytes = request.into_body().collect_bytes().await.expect("body");
        let body: Value = serde_json::from_slice(&bytes).expect("json");
        answer["status"] = body["status"].clone();
        send.send_response(
            Response::builder()
                .body(Body::from(serde_json::to_vec(&answer).expect("json")))
                .expect("response"),
        );
        let (request, send) = handle.next_request().await.expect("the Event");
        assert_eq!(request.method(), Method::POST);
        assert!(
            request.uri().path().ends_with("/namespaces/team-b/events"),
            "{}",
            request.uri()
        );
        let bytes = request.into_body().collect_bytes().await.expect("body");
        let event: Value = serde_json::from_slice(&bytes).expect("json");
        send.send_response(
            Response::builder()
                .body(Body::from(bytes.to_vec()))
                .expect("response"),
        );
        let extra = handle.next_request().await;
        assert!(extra.is_none(), "no other request");
        (body, event)
    });
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(md), ctx.clone()),
    )
    .await
    .expect("reconcile finished");
    assert_eq!(result.ok(), Some(Action::requeue(Duration::from_secs(30))));
    drop(ctx);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server done")
        .expect("server passed")
}

fn condition(status: &Value, kind: &str) -> Value {
    status["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_younger_deployment_reusing_a_served_name_is_refused_with_a_conflict() {
    let owner = md("team-a", "llama", "2026-01-01T00:00:00Z");
    let copy = md("team-b", "mine", "2026-02-01T00:00:00Z");
    let cache = vec![owner, copy.clone()];
    let (status, event) = refused(copy, Settings::default(), cache).await;
    let conflict = condition(&status, "Conflict");
    assert_eq!(conflict["status"], "True");
    assert_eq!(conflict["reason"], "ServedNameTaken");
    assert!(
        conflict["message"]
            .as_str()
            .unwrap_or("")
            .contains("team-a/llama"),
        "{conflict}"
    );
    assert_eq!(condition(&status, "Ready")["status"], "False");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "ServedNameTaken");
}

#[tokio::test]
async fn a_claim_the_served_names_list_does_not_give_is_refused() {
    let mut settings = Settings::default();
    settings
        .served_names
        .add_flag("team-a=llama-*")
        .expect("parses");
    settings
        .served_names
        .add_flag("team-b=qwen-*")
        .expect("parses");
    // team-b claims `llama-3`, which only team-a is given; no other deployment exists.
    let claim = md("team-b", "mine", "2026-02-01T00:00:00Z");
    let (status, event) = refused(claim.clone(), settings, vec![claim]).await;
    let conflict = condition(&status, "Conflict");
    assert_eq!(conflict["status"], "True");
    assert_eq!(conflict["reason"], "ServedNameNotAllowed");
    let message = conflict["message"].as_str().unwrap_or("");
    assert!(
        message.contains("team-b") && message.contains("llama-3"),
        "{message}"
    );
    assert_eq!(condition(&status, "Ready")["status"], "False");
    assert_eq!(event["reason"], "ServedNameNotAllowed");
    assert!(
        event["note"]
            .as_str()
            .unwrap_or("")
            .contains("--served-names"),
        "{event}"
    );
}
