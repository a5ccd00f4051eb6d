//! Scale from zero without waiting for the period, against a mocked API server: a model at
//! zero replicas that decided a moment ago is not decided for again, however many requests
//! wait; once its served name comes from the queue watch, the wake relay wakes it and the
//! scaling clock starts a replica at once.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use http::{Method, Request, Response};
use kube::client::Body;
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::Value;
use tokenscale_operator::autoscaler::{Demand, WindowedRate};
use tokenscale_operator::controller::{reconcile, ticker, wake};
use tokenscale_operator::crd::{ModelDeployment, ModelDeploymentStatus};
use tokenscale_operator::metrics_source::MetricsView;
use tower_test::mock::Handle;

// Shared with the other mocked-API tests; this file uses a part of it.
#[allow(dead_code)]
mod fixtures;

use fixtures::{DEPLOYMENT, EVENTS, PDB, SCALE, SERVICE, STATUS, context, deployment, md};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// `llama` (served as `llama-3`) allowed to scale to zero, and there now.
fn cold_model() -> ModelDeployment {
    let mut md = md("engine:v1");
    md.spec.replicas.min = 0;
    md.status = Some(ModelDeploymentStatus::default());
    md
}

/// One request waiting in the gateway's queue; nothing arrived in the windows yet.
fn one_queued() -> MetricsView {
    let zero = WindowedRate {
        stable: 0.0,
        panic: 0.0,
    };
    MetricsView {
        demand: Some(Demand {
            output_tokens_per_s: zero,
            arrival_requests_per_s: zero,
            mean_output_tokens_per_request: None,
            queued_requests: 1,
            running_requests: 0,
            completed_requests: 0,
            source: Default::default(),
            batch: Default::default(),
        }),
        ..MetricsView::default()
    }
}

/// Answers the next request, which must be `method path`, with `answer`; returns its body.
async fn answer(handle: &mut ApiHandle, method: Method, path: &str, answer: Value) -> Value {
    let next = tokio::time::timeout(Duration::from_secs(5), handle.next_request()).await;
    let (request, send) = next
        .expect("a request came in time")
        .expect("the reconciler made a request");
    assert_eq!((request.method(), request.uri().path()), (&method, path));
    let bytes = request.into_body().collect_bytes().await.expect("body");
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let answer = if answer.is_null() {
        body.clone()
    } else {
        answer
    };
    let response = Response::builder()
        .status(200)
        .body(Body::from(serde_json::to_vec(&answer).expect("json")))
        .expect("response");
    send.send_response(response);
    body
}

/// `future`'s output, failing the test after 5 s (a reconcile left waiting for an answer the
/// verifier does not give would hang it otherwise).
async fn in_time<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), future)
        .await
        .expect("finished in time")
}

/// The start of every reconcile of the cold model: read its replicas (none), re-apply.
async fn reapply(handle: &mut ApiHandle) {
    answer(handle, Method::GET, DEPLOYMENT, deployment(0, 0)).await;
    for path in [DEPLOYMENT, SERVICE, PDB] {
        answer(handle, Method::PATCH, path, Value::Null).await;
    }
}

#[tokio::test]
async fn a_woken_model_at_zero_replicas_is_scaled_to_one_before_its_period() {
    let object = cold_model();
    let (ctx, verifier) = context(one_queued());
    let mut handle = verifier.0;
    // The controller's cache of ModelDeployments, holding the cold model.
    let (store, mut writer) = reflector::store::<ModelDeployment>();
    writer.apply_watcher_event(&watcher::Event::Apply(object.clone()));

    // The model is handed to the clock by a reconcile and has decided a moment ago.
    let server = tokio::spawn(async move {
        reapply(&mut handle).await;
        handle
    });
    let first = in_time(reconcile(Arc::new(object.clone()), ctx.clone())).await;
    assert!(first.is_ok(), "{first:?}");
    let mut handle = server.await.expect("verifier passed");
    ctx.mark_decided(&object);

    // The scaling clock, ticking once an hour: only a wake can make it decide in this test.
    // Within the period the waiting request does not reach the policy: no request at all.
    let clock = tokio::spawn(ticker::run(ctx.clone(), Duration::from_secs(3600)));
    let relay = tokio::spawn(wake::relay(ctx.clone(), store));
    let early = tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await;
    assert!(early.is_err(), "a decision before the wake");

    // The queue watch names the served name: the clock decides for the model at once.
    let server = tokio::spawn(async move {
        answer(&mut handle, Method::GET, DEPLOYMENT, deployment(0, 0)).await;
        let scaled = answer(&mut handle, Method::PATCH, SCALE, Value::Null).await;
        let event = answer(&mut handle, Method::POST, EVENTS, Value::Null).await;
        let object = serde_json::to_value(cold_model()).expect("json");
        let status = answer(&mut handle, Method::PATCH, STATUS, object).await;
        (scaled, event, status, handle)
    });
    // Sent once the relay has subscribed (it may not have run yet).
    while ctx.queue_filled.send("llama-3".into()).is_err() {
        tokio::task::yield_now().await;
    }
    let (scaled, event, status, mut handle) = in_time(server).await.expect("verifier passed");
    clock.abort();
    relay.abort();
    let _ = (clock.await, relay.await);
    drop(ctx);
    assert!(
        handle.next_request().await.is_none(),
        "no request beyond the decision's"
    );
    assert_eq!(scaled["spec"]["replicas"], 1, "{scaled}");
    assert_eq!(event["reason"], "ScaleFromZero", "{event}");
    assert_eq!(status["status"]["desiredReplicas"], 1, "{status}");
}

#[tokio::test]
async fn a_filled_queue_of_a_model_with_replicas_wakes_nothing() {
    let mut object = cold_model();
    object.status = Some(ModelDeploymentStatus {
        desired_replicas: 2,
        ..ModelDeploymentStatus::default()
    });
    let (ctx, _verifier) = context(one_queued());
    let (store, mut writer) = reflector::store::<ModelDeployment>();
    writer.apply_watcher_event(&watcher::Event::Apply(object.clone()));
    let mut wakes = Box::pin(wake::triggers(ctx.clone(), store));
    ctx.mark_decided(&object);
    ctx.queue_filled
        .send("llama-3".into())
        .expect("the trigger subscribed");
    let woken = in_time(wakes.next()).await;
    assert_eq!(woken, Some(Vec::new()), "nothing woken");
    assert!(
        ctx.not_due_for(&object).is_some(),
        "its due-gate is untouched: the period decides"
    );
}
