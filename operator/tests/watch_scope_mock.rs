//! `--watch-namespaces` against a mocked API server: the start-up check and the controllers
//! list and watch only inside the watched namespaces (namespaced Roles suffice), and a 403
//! names the namespace it came from.

use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::json;
use tower_test::mock::{self, Handle};

// Shared with the other mocked-API tests; this file uses a part of it.
#[allow(dead_code)]
mod fixtures;

use fixtures::{api_status, context, no_metrics};
use tokenscale_operator::controller::{self, WatchScope, check_access};

const MD_PATH: &str = "/apis/tokenscale.dev/v1alpha1";

fn empty_list() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []})
}

fn respond(
    send: tower_test::mock::SendResponse<Response<Body>>,
    code: u16,
    body: serde_json::Value,
) {
    let response = Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(&body).expect("json")))
        .expect("response");
    send.send_response(response);
}

/// Answers the next `count` requests with `answer(path)`; returns their `path?query`s.
async fn serve(
    handle: &mut Handle<Request<Body>, Response<Body>>,
    count: usize,
    answer: impl Fn(&str) -> (u16, serde_json::Value),
) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..count {
        let next = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
            .await
            .expect("a request came in time");
        let (request, send) = next.expect("the client made a request");
        let (code, body) = answer(request.uri().path());
        seen.push(request.uri().to_string());
        respond(send, code, body);
    }
    seen
}

#[test]
fn the_flag_drops_blanks_and_duplicates_and_empty_means_all() {
    let flag =
        |v: &[&str]| WatchScope::from_flag(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(flag(&[]), WatchScope::All);
    assert_eq!(flag(&["", " "]), WatchScope::All);
    assert_eq!(
        flag(&["b", " a", "b"]),
        WatchScope::Namespaces(vec!["b".into(), "a".into()])
    );
    assert_eq!(flag(&["a"]).controllers(), [Some("a".to_string())]);
    assert_eq!(WatchScope::All.controllers(), [None]);
}

#[tokio::test]
async fn start_up_check_lists_each_watched_namespace_never_the_cluster() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let scope = WatchScope::from_flag(&["team-a".into(), "team-b".into()]);
    let check = tokio::spawn(async move { check_access(&client, &scope).await });
    let seen = serve(&mut handle, 2, |_| (200, empty_list())).await;
    let result = check.await.expect("check ran");
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        seen,
        [
            format!("{MD_PATH}/namespaces/team-a/modeldeployments?&limit=1"),
            format!("{MD_PATH}/namespaces/team-b/modeldeployments?&limit=1"),
        ]
    );
}

#[tokio::test]
async fn a_forbidden_namespace_fails_the_check_naming_it() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let scope = WatchScope::from_flag(&["team-a".into(), "secret".into()]);
    let check = tokio::spawn(async move { check_access(&client, &scope).await });
    let seen = serve(&mut handle, 2, |path| {
        if path.contains("/namespaces/secret/") {
            (403, api_status(403, "Forbidden"))
        } else {
            (200, empty_list())
        }
    })
    .await;
    assert_eq!(seen.len(), 2);
    let error = check
        .await
        .expect("check ran")
        .expect_err("403 fails the check");
    let message = error.to_string();
    assert!(message.contains("namespace secret"), "{message}");
    assert_eq!(error.metric_label(), "forbidden");
}

#[tokio::test]
async fn a_namespaced_controller_lists_and_watches_only_its_namespace() {
    let (ctx, verifier) = context(no_metrics());
    let mut handle = verifier.0;
    let run = tokio::spawn(controller::run(ctx, Some("team-a".into())));
    // The ModelDeployment watcher and the three child watchers each start with a list;
    // answer them with 403 and record the paths.
    let seen = serve(&mut handle, 4, |_| (403, api_status(403, "Forbidden"))).await;
    run.abort();
    let _ = run.await;
    for path in &seen {
        assert!(
            path.contains("/namespaces/team-a/"),
            "cluster-wide request: {path}"
        );
    }
    for kind in [
        "modeldeployments",
        "deployments",
        "services",
        "poddisruptionbudgets",
    ] {
        assert!(
            seen.iter().any(|p| p.contains(&format!("/{kind}?"))),
            "{kind} not listed: {seen:?}"
        );
    }
}
