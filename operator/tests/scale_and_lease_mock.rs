//! The Kubernetes scale target and the leader Lease shell against a mocked API server: the
//! exact requests they make and how they read the answers.

use std::time::Duration;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokenscale_operator::autoscaler::ReplicaLoad;
use tokenscale_operator::leader::LeaderElector;
use tokenscale_operator::scale::kubernetes::{POD_DELETION_COST, REMOVAL_COST};
use tokenscale_operator::scale::{KubernetesScaleTarget, ReplicaCounts, ScaleTarget};
use tower_test::mock::{self, Handle};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// Answers one request that must match `method` and `path`; returns its JSON body.
async fn answer(
    handle: &mut ApiHandle,
    method: Method,
    path: &str,
    status: u16,
    body: Value,
) -> Value {
    let (request, send) = handle.next_request().await.expect("a request");
    assert_eq!((request.method(), request.uri().path()), (&method, path));
    let bytes = request.into_body().collect_bytes().await.expect("body");
    let response = Response::builder()
        .status(status)
        .body(Body::from(serde_json::to_vec(&body).expect("json")))
        .expect("response");
    send.send_response(response);
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

fn client() -> (Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "ns"), handle)
}

fn load(name: &str, running: u64) -> ReplicaLoad {
    ReplicaLoad {
        name: name.into(),
        running_requests: running,
        ..ReplicaLoad::default()
    }
}

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/ns/deployments/m-engine";

#[tokio::test]
async fn scale_target_reads_counts_scales_and_marks_the_least_loaded_pod() {
    let (client, mut handle) = client();
    let target = KubernetesScaleTarget::new(client, "ns", "m-engine");
    let server = tokio::spawn(async move {
        let deployment = json!({"metadata": {"name": "m-engine"}, "spec": {"replicas": 3, "selector": {}, "template": {}},
                                "status": {"replicas": 3, "readyReplicas": 2}});
        answer(&mut handle, Method::GET, DEPLOYMENT, 200, deployment).await;
        let cost = answer(
            &mut handle,
            Method::PATCH,
            "/api/v1/namespaces/ns/pods/pod-b",
            200,
            json!({"metadata": {"name": "pod-b"}}),
        )
        .await;
        let scale = json!({"metadata": {"name": "m-engine"}, "spec": {"replicas": 2}});
        let replicas = answer(
            &mut handle,
            Method::PATCH,
            &format!("{DEPLOYMENT}/scale"),
            200,
            scale,
        )
        .await;
        (cost, replicas)
    });
    let counts = target.replicas().await.expect("read");
    assert_eq!(
        counts,
        Some(ReplicaCounts {
            desired: 3,
            current: 3,
            ready: 2
        })
    );
    let marked = target
        .mark_for_removal(&[load("pod-a", 5), load("pod-b", 1), load("pod-c", 3)])
        .await
        .expect("mark");
    assert_eq!(marked.as_deref(), Some("pod-b"));
    target.set_replicas(2).await.expect("scale");
    let (cost, replicas) = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("in time")
        .expect("server");
    assert_eq!(
        cost["metadata"]["annotations"][POD_DELETION_COST],
        REMOVAL_COST.to_string()
    );
    assert_eq!(replicas["spec"]["replicas"], 2);
}

#[tokio::test]
async fn missing_deployment_reads_as_none_and_no_loads_marks_nothing() {
    let (client, mut handle) = client();
    let target = KubernetesScaleTarget::new(client, "ns", "m-engine");
    let server = tokio::spawn(async move {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
        answer(&mut handle, Method::GET, DEPLOYMENT, 404, status).await;
    });
    assert_eq!(target.replicas().await.expect("404 is not an error"), None);
    assert_eq!(
        target.mark_for_removal(&[]).await.expect("nothing to do"),
        None
    );
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("in time")
        .expect("server");
}

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/tokenscale-operator";

fn elector(client: Client) -> LeaderElector {
    LeaderElector::new(
        client,
        "ops",
        "tokenscale-operator",
        "me",
        Duration::from_secs(15),
    )
}

#[tokio::test]
async fn lease_is_created_when_missing_and_followed_when_another_holds_it() {
    let (client, mut handle) = client();
    let e = elector(client);
    let server = tokio::spawn(async move {
        let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
        answer(&mut handle, Method::GET, LEASE, 404, not_found).await;
        let created = answer(
            &mut handle,
            Method::POST,
            "/apis/coordination.k8s.io/v1/namespaces/ops/leases",
            201,
            json!({"metadata": {"name": "tokenscale-operator"}}),
        )
        .await;
        // Now someone else renewed it a moment ago.
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let held = json!({"metadata": {"name": "tokenscale-operator", "resourceVersion": "7"},
                          "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15, "renewTime": now}});
        answer(&mut handle, Method::GET, LEASE, 200, held).await;
        created
    });
    assert!(
        e.try_lead().await.expect("round"),
        "a missing Lease is taken"
    );
    assert!(
        !e.try_lead().await.expect("round"),
        "a live Lease of another is followed"
    );
    let created = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("in time")
        .expect("server");
    assert_eq!(created["spec"]["holderIdentity"], "me");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 15);
}

/// A lease renewed long ago by the holder's clock is not taken at first sight (that clock may
/// just be behind ours): only once this process has seen it unchanged for a whole term.
#[tokio::test(start_paused = true)]
async fn expired_lease_is_taken_over_and_a_lost_race_is_not_leadership() {
    let (client, mut handle) = client();
    let e = elector(client);
    let server = tokio::spawn(async move {
        let expired = json!({"metadata": {"name": "tokenscale-operator", "resourceVersion": "7"},
                             "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15,
                                      "renewTime": "2020-01-01T00:00:00.000000Z", "leaseTransitions": 4}});
        answer(&mut handle, Method::GET, LEASE, 200, expired.clone()).await;
        answer(&mut handle, Method::GET, LEASE, 200, expired.clone()).await;
        answer(&mut handle, Method::GET, LEASE, 200, expired.clone()).await;
        let taken = answer(&mut handle, Method::PUT, LEASE, 200, expired.clone()).await;
        answer(&mut handle, Method::GET, LEASE, 200, expired).await;
        let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409});
        answer(&mut handle, Method::PUT, LEASE, 409, conflict).await;
        taken
    });
    assert!(
        !e.try_lead().await.expect("round"),
        "followed at first sight"
    );
    tokio::time::advance(Duration::from_secs(14)).await;
    assert!(
        !e.try_lead().await.expect("round"),
        "followed within a term"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(
        e.try_lead().await.expect("round"),
        "taken after a term unchanged"
    );
    assert!(
        !e.try_lead()
            .await
            .expect("a 409 is a lost race, not an error")
    );
    let taken = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("in time")
        .expect("server");
    assert_eq!(
        taken["metadata"]["resourceVersion"], "7",
        "optimistic concurrency on the read version"
    );
    assert_eq!(taken["spec"]["holderIdentity"], "me");
    assert_eq!(taken["spec"]["leaseTransitions"], 5);
}

/// On shutdown the leader clears the holder (on the version it read) so another replica takes
/// over at once; a Lease someone else holds is left alone.
#[tokio::test]
async fn release_clears_our_holder_and_leaves_anothers_lease_alone() {
    let (client, mut handle) = client();
    let e = elector(client);
    let server = tokio::spawn(async move {
        let ours = json!({"metadata": {"name": "tokenscale-operator", "resourceVersion": "9"},
                          "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                                   "renewTime": "2026-01-01T00:00:00.000000Z"}});
        answer(&mut handle, Method::GET, LEASE, 200, ours.clone()).await;
        let released = answer(&mut handle, Method::PUT, LEASE, 200, ours).await;
        let theirs = json!({"metadata": {"name": "tokenscale-operator", "resourceVersion": "10"},
                            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15}});
        answer(&mut handle, Method::GET, LEASE, 200, theirs).await;
        let extra = tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await;
        assert!(
            !matches!(extra, Ok(Some(_))),
            "another's Lease must not be written"
        );
        released
    });
    e.release().await;
    let second = tokio::spawn(async move { e.release().await });
    let released = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("in time")
        .expect("server");
    second.abort();
    assert!(released["spec"]["holderIdentity"].is_null(), "{released}");
    assert_eq!(released["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(released["metadata"]["resourceVersion"], "9");
}
