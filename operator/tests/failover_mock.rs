//! Operator failover against a mocked API server: what one leader writes into a
//! ModelDeployment's status (the autoscaler's memory, the SLO record, the removal marks) is
//! where the next leader starts, so it decides as the first would have.

#[allow(dead_code)]
mod fixtures;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixtures::{NS, deployment, md};
use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokenscale_operator::autoscaler::{
    Demand, Observations, PolicyState, ReplicaLoad, WindowedRate, decide,
};
use tokenscale_operator::controller::scaling::policy_spec;
use tokenscale_operator::controller::ticker::decide_due;
use tokenscale_operator::controller::{Context, Settings, reconcile};
use tokenscale_operator::crd::ModelDeployment;
use tokenscale_operator::metrics_source::{
    FixedSource, MetricsSource, MetricsView, ModelRef, Observed,
};
use tokenscale_operator::scale::kubernetes::{POD_DELETION_COST, REMOVAL_COST};
use tokenscale_operator::scaling::ScalingLoop;
use tokenscale_operator::telemetry::Metrics;
use tower_test::mock::{self, Handle};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// One request the mocked API server answered.
#[derive(Debug, Clone)]
struct Served {
    method: Method,
    path: String,
    body: Value,
}

/// Requests served so far, in order.
type Log = Arc<Mutex<Vec<Served>>>;

/// The engine Deployment as the mocked API server reads it now (a test may change it).
type Engine = Arc<Mutex<Value>>;

/// Answers every request until the last client is dropped: the Deployment reads as
/// `engine`, a status write answers the object with that status, Events are created, a pod
/// patch answers the pod, any other write echoes its body.
fn serve(mut handle: ApiHandle, object: &ModelDeployment, engine: Engine) -> Log {
    let log = Log::default();
    let object = serde_json::to_value(object).expect("json");
    let served = log.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_string();
            let bytes = request.into_body().collect_bytes().await.expect("body");
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (status, answer) = match method.clone() {
                // A decision lists the engine pods while a start is pending: none here.
                Method::GET if path.ends_with("/pods") => (
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}),
                ),
                Method::GET => (200, engine.lock().expect("engine").clone()),
                Method::POST => (201, body.clone()),
                _ if path.ends_with("/status") => {
                    let mut with_status = object.clone();
                    with_status["status"] = body["status"].clone();
                    (200, with_status)
                }
                // A pod after a merge patch: its annotations without the deleted ones.
                _ if path.contains("/pods/") => {
                    let name = path.rsplit('/').next().unwrap_or_default();
                    (200, json!({"metadata": {"name": name}}))
                }
                _ => (200, body.clone()),
            };
            let response = Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&answer).expect("json")))
                .expect("response");
            send.send_response(response);
            served
                .lock()
                .expect("log")
                .push(Served { method, path, body });
        }
    });
    log
}

/// A leader: an operator process with its own clock and memory, seeing `view`.
fn leader(view: MetricsView, object: &ModelDeployment, engine: Value) -> (Arc<Context>, Log) {
    leader_of(view, object, Arc::new(Mutex::new(engine)))
}

/// A leader whose Deployment reads as `engine` says at each request.
fn leader_of(view: MetricsView, object: &ModelDeployment, engine: Engine) -> (Arc<Context>, Log) {
    leader_with(Arc::new(FixedSource(view)), object, engine)
}

/// A leader whose metrics come from `source` and whose Deployment reads as `engine` says.
fn leader_with(
    source: Arc<dyn MetricsSource>,
    object: &ModelDeployment,
    engine: Engine,
) -> (Arc<Context>, Log) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Context::new(
        Client::new(service, NS),
        Arc::new(Metrics::default()),
        source,
        Settings::default(),
    );
    (Arc::new(ctx), serve(handle, object, engine))
}

/// One reconcile and the scaling clock's look after it; returns the last status written.
async fn reconcile_once(ctx: &Arc<Context>, object: &ModelDeployment, log: &Log) -> Value {
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        reconcile(Arc::new(object.clone()), ctx.clone()),
    )
    .await
    .expect("reconcile finished in time");
    assert!(result.is_ok(), "{result:?}");
    tokio::time::timeout(Duration::from_secs(5), decide_due(ctx))
        .await
        .expect("the decision finished in time");
    let log = log.lock().expect("log");
    let write = log
        .iter()
        .rev()
        .find(|s| s.path.ends_with("/status"))
        .expect("a status write");
    write.body["status"].clone()
}

/// Four ready replicas serving 2 000 output tokens/s well within the SLO (p95 TTFT 200 ms of
/// 500 ms, TPOT 20 ms of 50 ms): each replica does 500 tokens/s, five times the spec's hint.
fn steady() -> MetricsView {
    let rate = |v| WindowedRate {
        stable: v,
        panic: v,
    };
    MetricsView {
        demand: Some(Demand {
            output_tokens_per_s: rate(2_000.0),
            arrival_requests_per_s: rate(10.0),
            mean_output_tokens_per_request: Some(200.0),
            completed_requests: 600,
            running_requests: 40,
            ..Demand::default()
        }),
        ttft_p95_s: Some(0.2),
        tpot_p95_s: Some(0.02),
        ..MetricsView::default()
    }
}

/// Leader A's memory after watching `view` on four replicas for five minutes.
fn watched_for_five_minutes(ctx: &Context, object: &ModelDeployment, view: &MetricsView) {
    let spec = policy_spec(&object.spec);
    let mut policy = PolicyState::new(&spec);
    let now_s = ctx.now_s();
    let observations = Observations {
        ready_replicas: 4,
        current_replicas: 4,
        demand: view.demand.clone(),
        ttft_p95_s: view.ttft_p95_s,
        tpot_p95_s: view.tpot_p95_s,
        ..Observations::default()
    };
    for i in (1..=30).rev() {
        let at_s = now_s - 10.0 * f64::from(i);
        decide(&spec, &observations, &mut policy, at_s);
    }
    ctx.put_loop(
        object,
        ScalingLoop::resumed(spec, Some(policy), Default::default(), Vec::new()),
    );
}

/// The parts of a status that say what was decided and from what.
fn decided(status: &Value) -> Value {
    let scaling = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Scaling"))
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "desired": status["desiredReplicas"],
        "reason": scaling["reason"],
        "message": scaling["message"],
        "capacity": status["capacity"],
        "learned": status["autoscaler"]["capacityTokensPerSecondPerReplica"],
        "attainment": status["slo"]["attainment"],
    })
}

#[tokio::test]
async fn a_new_leader_starts_from_the_last_leaders_status_and_decides_as_it_would_have() {
    let object = md("engine:v1");
    let engine = deployment(4, 4);

    // Leader A learned that a replica does at least 500 tokens/s (the hint said 100), decides
    // and writes status; then decides once more, as it would have had it stayed leader.
    let (a, log_a) = leader(steady(), &object, engine.clone());
    watched_for_five_minutes(&a, &object, &steady());
    let written = reconcile_once(&a, &object, &log_a).await;
    let learned = written["autoscaler"]["capacityTokensPerSecondPerReplica"]
        .as_f64()
        .expect("the learned capacity is in status");
    assert!(learned >= 500.0, "learned {learned}");
    assert!(written["autoscaler"]["watchingSince"].is_string());
    a.wake(&object);
    let a_next = reconcile_once(&a, &object, &log_a).await;

    // Leader B has never seen the model; it reads A's status and makes A's next decision.
    let mut handed_over = object.clone();
    handed_over.status = Some(serde_json::from_value(written.clone()).expect("status parses"));
    let (b, log_b) = leader(steady(), &handed_over, engine.clone());
    let b_next = reconcile_once(&b, &handed_over, &log_b).await;
    assert_eq!(decided(&b_next), decided(&a_next));
    assert_eq!(b_next["desiredReplicas"], 5, "{b_next}");
    // The SLO held: every minute met; 2 000 good tokens/s on four GPUs.
    assert_eq!(b_next["slo"]["attainment"]["lastHour"], 1.0);
    assert_eq!(b_next["goodput"], 500.0);
    assert!(
        b_next["slo"]["history"]["minutes"]
            .as_str()
            .is_some_and(|m| m.ends_with('1')),
        "{b_next}"
    );

    // Without the status it would have started from the hint and scaled to twice as many.
    let (c, log_c) = leader(steady(), &object, engine);
    let c_next = reconcile_once(&c, &object, &log_c).await;
    assert_eq!(c_next["desiredReplicas"], 8, "{c_next}");
    assert_ne!(decided(&c_next), decided(&a_next));
}

/// Eight ready replicas, idle: `pod-0` is the busiest, `pod-7` the least loaded.
fn idle_eight() -> MetricsView {
    let replica_loads = (0..8u64)
        .map(|i| ReplicaLoad {
            name: format!("llama-engine-pod-{i}"),
            running_requests: 8 - i,
            ..ReplicaLoad::default()
        })
        .collect();
    MetricsView {
        demand: Some(Demand::default()),
        replica_loads,
        ..MetricsView::default()
    }
}

const PODS: &str = "/api/v1/namespaces/testns/pods/";

#[tokio::test]
async fn a_scale_in_marks_every_pod_it_removes_and_clears_the_marks_of_pods_that_stay() {
    // The last leader had watched the model for an hour and marked pod-1 (still here, now
    // busy) and pod-9 (gone) in an earlier scale-in.
    let mut object = md("engine:v1");
    let an_hour_ago = k8s_openapi::jiff::Timestamp::now() - std::time::Duration::from_secs(3600);
    object.status = Some(
        serde_json::from_value(json!({
            "autoscaler": {"watchingSince": an_hour_ago.to_string()},
            "markedForRemoval": ["llama-engine-pod-1", "llama-engine-pod-9"],
        }))
        .expect("status parses"),
    );
    let (ctx, log) = leader(idle_eight(), &object, deployment(8, 8));
    let status = reconcile_once(&ctx, &object, &log).await;
    drop(ctx);

    // 8 → 6 (a quarter per step): the two least-loaded pods are marked, pod-1's old mark
    // goes first, the gone pod-9 is left alone.
    assert_eq!(status["desiredReplicas"], 6, "{status}");
    let log = log.lock().expect("log").clone();
    let pod_writes: Vec<(String, Value)> = log
        .iter()
        .filter(|s| s.method == Method::PATCH && s.path.starts_with(PODS))
        .map(|s| {
            let annotations = s.body["metadata"]["annotations"].clone();
            (s.path.trim_start_matches(PODS).to_string(), annotations)
        })
        .collect();
    // In a merge patch, `null` deletes the annotation.
    let cleared = json!({ POD_DELETION_COST: null });
    let marked = json!({ POD_DELETION_COST: REMOVAL_COST.to_string() });
    assert_eq!(
        pod_writes,
        [
            ("llama-engine-pod-1".to_string(), cleared),
            ("llama-engine-pod-7".to_string(), marked.clone()),
            ("llama-engine-pod-6".to_string(), marked),
        ]
    );
    let scale = log
        .iter()
        .position(|s| s.path.ends_with("/scale"))
        .expect("scaled");
    let last_mark = log
        .iter()
        .rposition(|s| s.path.starts_with(PODS))
        .expect("marked");
    assert!(
        last_mark < scale,
        "the marks are in place before the scale-in"
    );
    assert_eq!(
        status["markedForRemoval"],
        json!(["llama-engine-pod-7", "llama-engine-pod-6"])
    );
}

#[tokio::test]
async fn pods_that_are_not_ready_go_first_so_fewer_ready_pods_are_marked() {
    let mut object = md("engine:v1");
    let an_hour_ago = k8s_openapi::jiff::Timestamp::now() - std::time::Duration::from_secs(3600);
    object.status = Some(
        serde_json::from_value(json!({"autoscaler": {"watchingSince": an_hour_ago.to_string()}}))
            .expect("status parses"),
    );
    // Eight pods, seven ready: the scale-in by two takes the unready one and one ready pod.
    let mut view = idle_eight();
    view.replica_loads.remove(0);
    let (ctx, log) = leader(view, &object, deployment(8, 7));
    let status = reconcile_once(&ctx, &object, &log).await;
    drop(ctx);
    assert_eq!(status["desiredReplicas"], 6, "{status}");
    assert_eq!(status["markedForRemoval"], json!(["llama-engine-pod-7"]));
}

#[tokio::test]
async fn a_replica_is_timed_from_its_order_to_ready_and_status_says_how_long_it_took() {
    let seconds = |value: &serde_json::Value| {
        serde_json::from_value::<tokenscale_operator::crd::Duration>(value.clone())
            .map(|d| d.as_secs_f64())
            .unwrap_or_else(|e| panic!("{value} is not a duration: {e}"))
    };
    let mut object = md("engine:1");
    // The CRD's hint: what the policy plans with until it has timed a start of its own.
    object.spec.scaling.startup_time = Some("7m".parse().expect("a duration"));
    let engine: Engine = Arc::new(Mutex::new(deployment(2, 2)));
    let (ctx, log) = leader_of(steady(), &object, engine.clone());
    let status = reconcile_once(&ctx, &object, &log).await;
    assert!(
        status["coldStart"].is_null(),
        "nothing started yet: {status}"
    );
    assert_eq!(seconds(&status["leadTime"]), 420.0, "the hint: {status}");
    // Two more replicas ordered: pending from this look on. (Each object below is a new
    // generation, so each look decides and writes status.)
    *engine.lock().expect("engine") = deployment(4, 2);
    object.metadata.generation = Some(3);
    let status = reconcile_once(&ctx, &object, &log).await;
    assert!(status["coldStart"].is_null(), "still starting: {status}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    *engine.lock().expect("engine") = deployment(4, 4);
    object.metadata.generation = Some(4);
    let status = reconcile_once(&ctx, &object, &log).await;
    let cold: tokenscale_operator::crd::Duration =
        serde_json::from_value(status["coldStart"].clone()).expect("a measured cold start");
    assert!(
        (0.3..5.0).contains(&cold.as_secs_f64()),
        "timed from the order to ready: {cold:?}"
    );
    // The measured start replaces the hint as the lead time, and is carried for a new leader.
    assert_eq!(seconds(&status["leadTime"]), cold.as_secs_f64(), "{status}");
    let carried: Vec<f64> = status["coldStarts"]
        .as_array()
        .expect("the measured starts")
        .iter()
        .map(seconds)
        .collect();
    assert_eq!(carried.len(), 2, "both replicas were timed: {status}");
}

/// A gateway's view of a ramp on tokio's clock: `rate_at(t)` requests/s of 100 output tokens
/// each at `t` seconds after it was made, all served well within the SLO; the stable window's
/// mean trails by half its 60 s.
struct Ramp {
    start: tokio::time::Instant,
    rate_at: fn(f64) -> f64,
}

impl MetricsSource for Ramp {
    fn observe<'a>(&'a self, _: &'a ModelRef) -> futures::future::BoxFuture<'a, Observed> {
        let now_s = self.start.elapsed().as_secs_f64();
        let (stable, panic) = ((self.rate_at)(now_s - 30.0), (self.rate_at)(now_s));
        let windowed = |per_request: f64| WindowedRate {
            stable: stable * per_request,
            panic: panic * per_request,
        };
        let view = MetricsView {
            demand: Some(Demand {
                output_tokens_per_s: windowed(100.0),
                arrival_requests_per_s: windowed(1.0),
                mean_output_tokens_per_request: Some(100.0),
                completed_requests: (stable * 60.0) as u64,
                running_requests: 40,
                ..Demand::default()
            }),
            ttft_p95_s: Some(0.2),
            tpot_p95_s: Some(0.02),
            ..MetricsView::default()
        };
        Box::pin(async move { Observed::View(view) })
    }
}

/// When the ramp starts, on the paused clock: after the slow start below.
const RAMP_AT_S: f64 = 330.0;

/// 60 requests/s, then from [`RAMP_AT_S`] 0.12 more each second (12 output tokens/s more).
fn ramp(t_s: f64) -> f64 {
    60.0 + 0.12 * (t_s - RAMP_AT_S).max(0.0)
}

/// A leader deciding every 15 s for 570 s on [`ramp`], whose Deployment reads `engine_at(t)`;
/// returns its last status.
async fn on_the_ramp(object: &ModelDeployment, engine_at: fn(f64) -> Value) -> Value {
    let engine: Engine = Arc::new(Mutex::new(engine_at(0.0)));
    let ramp = Ramp {
        start: tokio::time::Instant::now(),
        rate_at: ramp,
    };
    let (ctx, log) = leader_with(Arc::new(ramp), object, engine.clone());
    let mut status = Value::Null;
    for look in 0..=38u32 {
        let t_s = 15.0 * f64::from(look);
        *engine.lock().expect("engine") = engine_at(t_s);
        status = reconcile_once(&ctx, object, &log).await;
        tokio::time::sleep(Duration::from_secs(15)).await;
    }
    status
}

#[tokio::test(start_paused = true)]
async fn a_replica_ready_five_minutes_after_its_order_moves_the_lead_time_and_the_plan() {
    let seconds = |value: &Value| {
        serde_json::from_value::<tokenscale_operator::crd::Duration>(value.clone())
            .map(|d| d.as_secs_f64())
            .unwrap_or_else(|e| panic!("{value} is not a duration: {e}"))
    };
    let mut object = md("engine:1");
    object.spec.replicas.max = 40;
    object.spec.scaling.initial_tokens_per_second_per_gpu = Some(1_000.0);
    // One leader sees an eleventh replica ordered at 15 s turn ready at 315 s; the other's
    // eleven are ready from the start, so it plans with the CRD's 60 s.
    let slow = on_the_ramp(&object, |t_s| match t_s {
        t if t < 15.0 => deployment(10, 10),
        t if t < 315.0 => deployment(11, 10),
        _ => deployment(11, 11),
    })
    .await;
    let hinted = on_the_ramp(&object, |_| deployment(11, 11)).await;
    assert_eq!(seconds(&slow["coldStart"]), 300.0, "{slow}");
    assert_eq!(seconds(&slow["leadTime"]), 300.0, "{slow}");
    assert_eq!(seconds(&hinted["leadTime"]), 60.0, "{hinted}");

    // At 570 s both see the same ramp; the slow one plans 240 s further along it: 2,880
    // tokens/s more, in replicas of the capacity both report at the 80% target.
    let capacity = |status: &Value| {
        status["capacity"]["tokensPerSecondPerReplica"]
            .as_f64()
            .expect("a capacity")
    };
    assert_eq!(capacity(&slow), capacity(&hinted));
    let desired = |status: &Value| status["desiredReplicas"].as_f64().expect("a count");
    let further = desired(&slow) - desired(&hinted);
    let expected = 12.0 * 240.0 / (0.8 * capacity(&slow));
    assert!(
        further > 0.0 && (further - expected).abs() <= 1.0,
        "{} against {} replicas: {further} more, the ramp adds {expected:.2}",
        desired(&slow),
        desired(&hinted)
    );
}
