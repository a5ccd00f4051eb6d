//! The controller's triggers against a mocked API server that lists and watches: after the
//! first reconcile, a status-only write of the ModelDeployment and a status-only change of
//! its Deployment apply no child (the requests are counted); a spec edit and a replica
//! turning ready still reconcile.

use std::collections::HashMap;
use std::time::Duration;

use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use tokenscale_operator::controller;
use tower_test::mock::{Handle, SendResponse};

// Shared with the other mocked-API tests; this file uses a part of it.
#[allow(dead_code)]
mod fixtures;

use fixtures::{DEPLOYMENT, NS, PDB, SERVICE, api_status, context, deployment, md, no_metrics};

/// The kinds the controller lists and watches, by the last segment of their list path.
const KINDS: [&str; 4] = [
    "modeldeployments",
    "deployments",
    "services",
    "poddisruptionbudgets",
];

/// A mocked API server holding one ModelDeployment: it answers lists, holds watches open
/// until the test sends them an event, answers the reconcile's reads, and records every
/// write (PATCH or POST) it receives.
struct Cluster {
    handle: Handle<Request<Body>, Response<Body>>,
    /// The ModelDeployment as the server has it.
    md: Value,
    /// Each kind's open watch, answered when the test sends an event.
    watches: HashMap<&'static str, SendResponse<Response<Body>>>,
    /// Whether the engine Deployment exists yet (the first read of it is a 404).
    deployment_exists: bool,
    /// `(method, path, body)` of every write.
    writes: Vec<(Method, String, Value)>,
}

fn respond(send: SendResponse<Response<Body>>, code: u16, body: Vec<u8>) {
    let response = Response::builder()
        .status(code)
        .body(Body::from(body))
        .expect("response");
    send.send_response(response);
}

fn json_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("json")
}

impl Cluster {
    fn new(handle: Handle<Request<Body>, Response<Body>>, md: Value) -> Self {
        Self {
            handle,
            md,
            watches: HashMap::new(),
            deployment_exists: false,
            writes: Vec::new(),
        }
    }

    /// Serves requests until none comes for a while: with the clock paused, the wait ends
    /// only once every task (the controller's included) has nothing left to do.
    async fn serve_until_quiet(&mut self) {
        while let Ok(next) =
            tokio::time::timeout(Duration::from_secs(2), self.handle.next_request()).await
        {
            let (request, send) = next.expect("the controller is running");
            self.answer(request, send).await;
        }
    }

    async fn answer(&mut self, request: Request<Body>, send: SendResponse<Response<Body>>) {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or_default().to_string();
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .expect("request body");
        if method == Method::PATCH || method == Method::POST {
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            self.writes.push((method, path, body.clone()));
            return respond(send, 200, json_bytes(&body));
        }
        if let Some(kind) = KINDS.iter().find(|k| path.ends_with(&format!("/{k}"))) {
            if query.contains("watch=true") {
                self.watches.insert(kind, send);
                return;
            }
            let items = if *kind == "modeldeployments" {
                vec![self.md.clone()]
            } else {
                vec![]
            };
            let list = json!({"apiVersion": "v1", "kind": "List",
                              "metadata": {"resourceVersion": "1"}, "items": items});
            return respond(send, 200, json_bytes(&list));
        }
        // A decision lists the engine pods while a start is pending (their start phases):
        // none have conditions here.
        if path == format!("/api/v1/namespaces/{NS}/pods") {
            let list = json!({"apiVersion": "v1", "kind": "PodList",
                              "metadata": {"resourceVersion": "1"}, "items": []});
            return respond(send, 200, json_bytes(&list));
        }
        if path == DEPLOYMENT && std::mem::replace(&mut self.deployment_exists, true) {
            return respond(send, 200, json_bytes(&deployment(1, 0)));
        }
        if path == DEPLOYMENT {
            return respond(send, 404, json_bytes(&api_status(404, "NotFound")));
        }
        panic!("unexpected request {method} {path}?{query}");
    }

    /// Sends `object` as a MODIFIED event on `kind`'s open watch, which then ends (the
    /// watcher opens a new one).
    fn modify(&mut self, kind: &str, object: Value) {
        let send = self
            .watches
            .remove(kind)
            .unwrap_or_else(|| panic!("no open watch of {kind}"));
        let mut line = json_bytes(&json!({"type": "MODIFIED", "object": object}));
        line.push(b'\n');
        respond(send, 200, line);
    }

    /// The paths of the children applied since write number `from`.
    fn applies_since(&self, from: usize) -> Vec<&str> {
        self.writes[from..]
            .iter()
            .map(|(_, path, _)| path.as_str())
            .collect()
    }
}

/// The ModelDeployment at `generation` and resource version `version`, running `image`,
/// with `desired` in its status.
fn model(generation: i64, version: &str, image: &str, desired: i32) -> Value {
    let mut object = serde_json::to_value(md(image)).expect("json");
    object["metadata"]["generation"] = json!(generation);
    object["metadata"]["resourceVersion"] = json!(version);
    object["status"] = json!({"desiredReplicas": desired, "replicas": 1});
    object
}

/// The engine Deployment as the server has it after the apply: owned by the model, with
/// `ready` ready replicas and a status `observedGeneration`.
fn engine(version: &str, ready: i32, observed: i64) -> Value {
    let mut object = deployment(1, ready);
    object["metadata"]["generation"] = json!(1);
    object["metadata"]["resourceVersion"] = json!(version);
    object["metadata"]["uid"] = json!("uid-d");
    object["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "tokenscale-operator"});
    object["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "tokenscale.dev/v1alpha1", "kind": "ModelDeployment",
        "name": "llama", "uid": "uid-1", "controller": true
    }]);
    object["status"]["observedGeneration"] = json!(observed);
    object
}

#[tokio::test(start_paused = true)]
async fn status_writes_apply_no_child_and_spec_edits_and_readiness_do() {
    let (ctx, verifier) = context(no_metrics());
    let mut cluster = Cluster::new(verifier.0, model(2, "1", "v1", 1));
    let run = tokio::spawn(controller::run(ctx, Some(NS.into())));

    // The first list reconciles the model: its three children are applied.
    cluster.serve_until_quiet().await;
    assert_eq!(cluster.applies_since(0), [DEPLOYMENT, SERVICE, PDB]);
    assert!(
        cluster.writes.iter().all(|(m, _, _)| m == Method::PATCH),
        "server-side applies only"
    );
    // The watch then sees the Deployment it created (first sight of a child reconciles).
    cluster.modify("deployments", engine("4", 0, 0));
    cluster.serve_until_quiet().await;
    let before = cluster.writes.len();

    // The scaling clock's status write comes back as an event of the same generation, and
    // the Deployment's controller bumps its own status: nothing is applied.
    cluster.modify("modeldeployments", model(2, "2", "v1", 3));
    cluster.modify("deployments", engine("5", 0, 1));
    cluster.serve_until_quiet().await;
    assert_eq!(
        cluster.applies_since(before),
        Vec::<&str>::new(),
        "status-only changes re-applied children"
    );

    // A spec edit (a new generation) reconciles once and applies the new image.
    cluster.modify("modeldeployments", model(3, "3", "v2", 3));
    cluster.serve_until_quiet().await;
    assert_eq!(cluster.applies_since(before), [DEPLOYMENT, SERVICE, PDB]);
    let image = &cluster.writes[before].2["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(image, "v2");
    let before = cluster.writes.len();

    // A replica turning ready reconciles (it is timed as a cold start there).
    cluster.modify("deployments", engine("6", 1, 1));
    cluster.serve_until_quiet().await;
    assert_eq!(cluster.applies_since(before), [DEPLOYMENT, SERVICE, PDB]);

    run.abort();
    let _ = run.await;
}
