//! One owner per served name, against a mocked API server: a ModelDeployment reusing the
//! served name of an older one in another namespace gets no children, only a status with a
//! `Conflict` condition naming the owner; the owner reconciles as usual.

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

#[tokio::test]
async fn a_younger_deployment_reusing_a_served_name_is_refused_with_a_conflict() {
    let owner = md("team-a", "llama", "2026-01-01T00:00:00Z");
    let copy = md("team-b", "mine", "2026-02-01T00:00:00Z");
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Context::new(
        Client::new(service, "team-b"),
        Arc::new(Metrics::default()),
        Arc::new(FixedSource(MetricsView::default())),
        Settings::default(),
    );
    // The controller's cache: both deployments, listed.
    let (store, mut writer) = reflector::store::<ModelDeployment>();
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitApply(owner));
    writer.apply_watcher_event(&Event::InitApply(copy.clone()));
    writer.apply_watcher_event(&Event::InitDone);
    assert!(ctx.deployments.set(store).is_ok());
    let ctx = Arc::new(ctx);

    let mut answer = serde_json::to_value(&copy).expect("json");
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("one request");
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
        let extra = handle.next_request().await;
        assert!(extra.is_none(), "no other request");
        body
    });
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(copy), ctx.clone()),
    )
    .await
    .expect("reconcile finished");
    assert_eq!(result.ok(), Some(Action::requeue(Duration::from_secs(30))));
    drop(ctx);
    let status = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server done")
        .expect("server passed");
    let conditions = status["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let find = |t: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let conflict = find("Conflict");
    assert_eq!(conflict["status"], "True");
    assert_eq!(conflict["reason"], "ServedNameTaken");
    assert!(
        conflict["message"]
            .as_str()
            .unwrap_or("")
            .contains("team-a/llama"),
        "{conflict}"
    );
    assert_eq!(find("Ready")["status"], "False");
}
