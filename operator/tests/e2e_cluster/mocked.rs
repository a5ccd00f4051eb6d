//! The suite's own steps against a mocked API server and a recording helm: the set-up's
//! requests (namespaces, CRD wait, the applied model) and helm call, the tear-down's, the
//! load's path through the service proxy, and the replica watch.

use std::sync::Mutex;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

use crate::load::{Load, chat_path, wait_for_replicas};
use crate::plan::{Images, MODEL, OWNER_LABEL, Plan, not_run_reason};
use crate::setup::{CRD_NAME, HelmRunner, set_up, tear_down};
use crate::wait::SuiteError;

type Handle = mock::Handle<Request<Body>, Response<Body>>;

/// Records every helm call; fails them all when `fail` is set.
#[derive(Default)]
struct RecordingHelm {
    calls: Mutex<Vec<Vec<String>>>,
    fail: bool,
}

impl HelmRunner for RecordingHelm {
    fn helm(&self, args: &[String]) -> Result<String, SuiteError> {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(args.to_vec());
        }
        if self.fail {
            return Err(SuiteError::Io {
                what: "helm".into(),
                source: std::io::Error::other("release not found"),
            });
        }
        Ok(String::new())
    }
}

/// A client whose every request reaches the returned handle.
fn mocked_client() -> (Client, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

fn plan() -> Plan {
    let images = Images {
        prefix: "registry.test/ts".into(),
        tag: "e2e1".into(),
    };
    Plan::new("abc123", images)
}

fn respond(send: mock::SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let response = Response::builder().status(status).body(Body::from(bytes));
    if let Ok(response) = response {
        send.send_response(response);
    }
}

/// The next request: method, path, query and JSON body (Null when empty).
async fn next(
    handle: &mut Handle,
) -> (
    Method,
    String,
    String,
    Value,
    mock::SendResponse<Response<Body>>,
) {
    let (request, send) = handle.next_request().await.expect("a request");
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let bytes = request.into_body().collect_bytes().await.expect("body");
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let query = uri.query().unwrap_or("").to_string();
    (method, uri.path().to_string(), query, body, send)
}

#[test]
fn without_a_kubeconfig_the_suite_says_why_it_does_not_run() {
    let expected = "TOKENSCALE_E2E_KUBECONFIG is not set (see operator/README.md, \
                    \"Running the real-cluster suite\")";
    assert_eq!(not_run_reason(None).as_deref(), Some(expected));
    assert_eq!(not_run_reason(Some("  ")).as_deref(), Some(expected));
    assert_eq!(not_run_reason(Some("/home/me/.kube/config")), None);
}

/// The API server side of [`set_up`]: two namespaces created with the run's label, the CRD
/// read until Established, the model applied server-side; the applied body is returned.
async fn serve_set_up(mut handle: Handle, expected: Plan) -> Value {
    for name in [&expected.release_namespace, &expected.model_namespace] {
        let (method, path, _, body, send) = next(&mut handle).await;
        assert_eq!(
            (method, path.as_str()),
            (Method::POST, "/api/v1/namespaces")
        );
        assert_eq!(body["metadata"]["name"], *name);
        assert_eq!(body["metadata"]["labels"][OWNER_LABEL], expected.release);
        respond(send, StatusCode::CREATED, &body);
    }
    let (method, path, _, _, send) = next(&mut handle).await;
    let crd_path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}");
    assert_eq!((method, path), (Method::GET, crd_path));
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {"group": "tokenscale.dev", "scope": "Namespaced", "versions": [],
                 "names": {"plural": "modeldeployments", "kind": "ModelDeployment"}},
        "status": {"conditions": [{"type": "Established", "status": "True"}]}});
    respond(send, StatusCode::OK, &crd);
    let (method, path, query, body, send) = next(&mut handle).await;
    let md_path = format!(
        "/apis/tokenscale.dev/v1alpha1/namespaces/{}/modeldeployments/{MODEL}",
        expected.model_namespace
    );
    assert_eq!((method, path), (Method::PATCH, md_path));
    assert!(
        query.contains("fieldManager=tokenscale-e2e") && query.contains("force=true"),
        "{query}"
    );
    respond(send, StatusCode::OK, &body);
    assert!(handle.next_request().await.is_none(), "no other request");
    body
}

/// The one helm call: an install of the chart into the release namespace that waits, with
/// a values file naming the images told; the values are returned.
fn install_values(calls: &[Vec<String>], plan: &Plan) -> Value {
    assert_eq!(calls.len(), 1, "one helm call: {calls:?}");
    let args = &calls[0];
    assert_eq!(args[..3], ["upgrade", "--install", &plan.release]);
    assert!(args[3].ends_with("charts/tokenscale"), "{args:?}");
    let flag = |name: &str| {
        let at = args.iter().position(|a| a == name)?;
        args.get(at + 1).cloned()
    };
    assert_eq!(flag("--namespace"), Some(plan.release_namespace.clone()));
    assert!(args.contains(&"--wait".to_string()), "{args:?}");
    let values_file = flag("--values").expect("a values file");
    let bytes = std::fs::read(&values_file).expect("values written");
    serde_json::from_slice(&bytes).expect("json")
}

#[tokio::test]
async fn set_up_creates_the_namespaces_installs_the_chart_and_applies_the_sim_model() {
    let (client, handle) = mocked_client();
    let plan = plan();
    let server = tokio::spawn(serve_set_up(handle, plan.clone()));
    let helm = RecordingHelm::default();
    let dir = std::env::temp_dir().join(format!("e2e-cluster-mock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let set_up = set_up(&client, &helm, &plan, &dir);
    let result = tokio::time::timeout(Duration::from_secs(10), set_up).await;
    let applied = result.expect("set-up finished").expect("set-up succeeded");
    drop(client);
    let body = server.await.expect("server passed");
    let calls = helm.calls.lock().expect("calls").clone();
    let values = install_values(&calls, &plan);
    let _ = std::fs::remove_dir_all(&dir);

    let spec = &body["spec"];
    assert_eq!(spec["engine"]["backend"], "sim");
    assert_eq!(spec["engine"]["image"], "registry.test/ts/engine:e2e1");
    assert_eq!(spec["replicas"], json!({"min": 1, "max": 3}));
    assert_eq!(
        applied.spec.validate(),
        Ok(()),
        "the operator accepts the model"
    );
    let images = (
        &values["operator"]["image"]["repository"],
        &values["gateway"]["image"]["repository"],
        &values["gateway"]["image"]["tag"],
    );
    assert_eq!(
        images,
        (
            &json!("registry.test/ts/operator"),
            &json!("registry.test/ts/gateway"),
            &json!("e2e1")
        )
    );
    assert_eq!(values["crds"], json!({"install": true, "keep": false}));
}

#[tokio::test]
async fn tear_down_deletes_both_namespaces_even_when_helm_uninstall_fails() {
    let (client, mut handle) = mocked_client();
    let plan = plan();
    // The model's namespace first, then the release's; the second is already gone (404),
    // which is not a problem for a clean-up.
    let expected = [
        (plan.model_namespace.clone(), StatusCode::OK),
        (plan.release_namespace.clone(), StatusCode::NOT_FOUND),
    ];
    let server = tokio::spawn(async move {
        for (name, status) in expected {
            let (method, path, _, _, send) = next(&mut handle).await;
            assert_eq!(
                (method, path),
                (Method::DELETE, format!("/api/v1/namespaces/{name}"))
            );
            let body = if status == StatusCode::OK {
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
                       "status": {"phase": "Terminating"}})
            } else {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "NotFound", "code": 404, "message": "not found"})
            };
            respond(send, status, &body);
        }
    });
    let helm = RecordingHelm {
        fail: true,
        ..Default::default()
    };
    let problems = tokio::time::timeout(Duration::from_secs(10), tear_down(&client, &helm, &plan))
        .await
        .expect("tear-down finished");
    drop(client);
    server.await.expect("server passed");
    let calls = helm.calls.lock().expect("calls").clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0][..2], ["uninstall", &plan.release]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(&format!("helm uninstall {}", plan.release)),
        "{problems:?}"
    );
}

#[tokio::test]
async fn load_streams_through_the_service_proxy_and_the_watch_sees_the_replicas() {
    let (client, mut handle) = mocked_client();
    let plan = plan();
    let proxy = chat_path(&plan);
    assert_eq!(
        proxy,
        "/api/v1/namespaces/tokenscale-e2e-abc123/services/tokenscale-e2e-abc123-gateway:80/proxy/v1/chat/completions"
    );
    let (streamed, mut streamed_rx) = tokio::sync::mpsc::unbounded_channel();
    let model = plan.model_deployment();
    let server = tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let path = request.uri().path().to_string();
            if request.method() == Method::GET {
                let mut md = model.clone();
                md["status"] = json!({"desiredReplicas": 2, "readyReplicas": 2, "replicas": 2});
                respond(send, StatusCode::OK, &md);
                continue;
            }
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"one\"}}]}\n\ndata: [DONE]\n\n";
            if let Ok(response) = Response::builder().body(Body::from(sse.as_bytes().to_vec())) {
                send.send_response(response);
            }
            let _ = streamed.send((path, body));
        }
    });
    let load = Load::start(&client, &plan, 2);
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let received = tokio::time::timeout(Duration::from_secs(10), streamed_rx.recv()).await;
        seen.push(
            received
                .expect("a stream within 10 s")
                .expect("server running"),
        );
    }
    let report = load.stop().await;
    let watched = wait_for_replicas(
        &client,
        &plan,
        "two ready",
        Duration::from_secs(5),
        |d, r| d == 2 && r == 2,
    )
    .await;
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;

    assert!(seen.iter().all(|(path, _)| *path == proxy), "{seen:?}");
    assert!(
        seen.iter()
            .all(|(_, body)| body["model"] == MODEL && body["stream"] == true),
        "{seen:?}"
    );
    assert!(report.completed >= 4 && report.failed == 0, "{report:?}");
    assert_eq!(watched.expect("the watch saw two ready"), (2, 2));
}

#[test]
fn the_values_render_with_the_chart_and_name_the_images_told() {
    let plan = plan();
    let dir = std::env::temp_dir().join(format!("e2e-cluster-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let values = dir.join("values.json");
    std::fs::write(&values, serde_json::to_vec(&plan.values()).expect("json")).expect("written");
    let render = tokenscale_e2e::chart::Render {
        values: Some(&values),
        ..Default::default()
    };
    let rendered = render.template();
    let _ = std::fs::remove_dir_all(&dir);
    let rendered = rendered.expect("the chart renders with the suite's values (schema included)");
    assert!(
        rendered.contains("image: registry.test/ts/operator:e2e1"),
        "operator image"
    );
    assert!(
        rendered.contains("image: registry.test/ts/gateway:e2e1"),
        "gateway image"
    );
    assert!(
        !rendered.contains("helm.sh/resource-policy: keep"),
        "the CRD goes with the release"
    );
    assert!(
        !rendered.contains("kind: PersistentVolumeClaim"),
        "no claim a test cluster may lack"
    );
}
