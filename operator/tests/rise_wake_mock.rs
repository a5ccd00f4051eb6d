//! A rise wakes a decision between periods, against a mocked API server on tokio's paused
//! clock: the scaling clock's sampler scrapes the gateway every second; arrivals stepping up
//! 1.7x are met by a scale-up (PanicScaleUp) within seconds, not at the 60 s period's next
//! decision, and noise of ±15% wakes nothing.

#[allow(dead_code)]
mod fixtures;

use std::sync::Arc;
use std::time::Duration;

use fixtures::*;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::Value;
use tokenscale_common::metrics::gateway;
use tokenscale_common::prom_text::Sample;
use tokenscale_operator::controller::{Context, Settings, reconcile, ticker};
use tokenscale_operator::metrics_source::readings::read;
use tokenscale_operator::metrics_source::{
    MetricsSource, ModelRef, Observed, ScrapeRound, TargetKind,
};
use tokenscale_operator::telemetry::Metrics;
use tower_test::mock;

/// When the step comes, on the paused clock (half way through the 60 s period).
const STEP_AT_S: f64 = 30.0;
/// How long after the step the scale-up may come.
const WITHIN_S: f64 = 5.0;

/// A gateway whose arrivals (100 output tokens each, all served fast) come at `rate_at(t)`
/// requests/s, `t` seconds on tokio's clock after it was made; its counters are their sum.
struct Gateway {
    start: tokio::time::Instant,
    rate_at: fn(f64) -> f64,
}

impl Gateway {
    fn new(rate_at: fn(f64) -> f64) -> Self {
        Self {
            start: tokio::time::Instant::now(),
            rate_at,
        }
    }

    /// Requests arrived by now (the rate summed over 10 ms steps).
    fn arrived(&self) -> f64 {
        let now_s = self.start.elapsed().as_secs_f64();
        let steps = (now_s / 0.01).round() as u32;
        (0..steps)
            .map(|i| (self.rate_at)(f64::from(i) * 0.01) * 0.01)
            .sum()
    }
}

impl MetricsSource for Gateway {
    fn scrapes(&self) -> bool {
        true
    }

    fn observe<'a>(&'a self, model: &'a ModelRef) -> BoxFuture<'a, Observed> {
        let requests = self.arrived();
        let served = model.served_name.clone();
        let sample = |name: &str, le: Option<&str>, value: f64| {
            let mut labels = vec![("model_name".to_string(), served.clone())];
            labels.extend(le.map(|le| ("le".to_string(), le.to_string())));
            Sample {
                name: name.to_string(),
                labels,
                value,
            }
        };
        let mut samples = vec![
            sample(gateway::ARRIVALS_TOTAL, None, requests),
            sample(gateway::REQUESTS_TOTAL, None, requests),
            sample(gateway::GENERATION_TOKENS_TOTAL, None, 100.0 * requests),
        ];
        // Every request answered fast: its first token within 0.1 s, each next within 10 ms.
        for (histogram, fast) in [
            (gateway::TIME_TO_FIRST_TOKEN_SECONDS, "0.1"),
            (gateway::TIME_PER_OUTPUT_TOKEN_SECONDS, "0.01"),
        ] {
            let bucket = format!("{histogram}_bucket");
            samples.extend([fast, "+Inf"].map(|le| sample(&bucket, Some(le), requests)));
        }
        let reading = read(TargetKind::Gateway, &samples, &model.served_name);
        Box::pin(async move {
            Observed::Round(ScrapeRound {
                readings: vec![("gateway".into(), TargetKind::Gateway, reading)],
                failed: 0,
            })
        })
    }
}

/// 20 requests/s (2,000 tokens/s), 1.7x that from [`STEP_AT_S`].
fn step_up(t_s: f64) -> f64 {
    if t_s < STEP_AT_S { 20.0 } else { 34.0 }
}

/// 20 requests/s, ±15% in blocks of three seconds (half the burst window: the most the
/// burst window can lean one way).
fn noisy(t_s: f64) -> f64 {
    if (t_s / 3.0).floor() as i64 % 2 == 0 {
        23.0
    } else {
        17.0
    }
}

/// The requests of the reconcile (one ready replica) and of the clock's first decision at
/// once (a new model): steady at one replica, status written.
fn first_steps() -> Vec<Step> {
    let get = || step(Method::GET, DEPLOYMENT, 200, Answer::Json(deployment(1, 1)));
    let apply = |path| step(Method::PATCH, path, 200, Answer::Echo);
    vec![
        get(),
        apply(DEPLOYMENT),
        apply(SERVICE),
        apply(PDB),
        get(),
        step(Method::PATCH, STATUS, 200, Answer::WithStatus),
    ]
}

/// Reconciles the model, runs the scaling clock (a scrape a second) on `gateway` until
/// `until_s`, and returns the request bodies the API server saw.
async fn clock_until(gateway: Gateway, steps: Vec<Step>, until_s: f64) -> Vec<Value> {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Arc::new(Context::new(
        Client::new(service, NS),
        Arc::new(Metrics::default()),
        Arc::new(gateway),
        Settings::default(),
    ));
    let server = ApiServerVerifier(handle).run(Scenario::Steps(steps));
    // Decides every 60 s; a replica does 3,000 tokens/s (2,400 at the target utilisation):
    // one carries the 2,000 tokens/s before the step, the step's burst needs two while the
    // stable window's mean still fits one.
    let mut object = md_any();
    object.spec.scaling.period = "60s".parse().expect("a duration");
    object.spec.scaling.initial_tokens_per_second_per_gpu = Some(3_000.0);
    let result = reconcile(Arc::new(object), ctx.clone()).await;
    assert!(result.is_ok(), "{result:?}");
    let clock = tokio::spawn(ticker::run(ctx.clone(), Duration::from_secs(1)));
    tokio::time::sleep(Duration::from_secs_f64(until_s)).await;
    clock.abort();
    // The clock task gone, the last client goes with the context: the server checks that
    // nothing but its steps was asked.
    let _ = clock.await;
    drop(ctx);
    server
        .await
        .expect("the API server saw its steps and no other")
}

#[tokio::test(start_paused = true)]
async fn a_rise_between_periods_is_met_within_seconds() {
    let mut steps = first_steps();
    // The rise's decision: read the count, scale 1 -> 2, the Event, status.
    steps.extend([
        step(Method::GET, DEPLOYMENT, 200, Answer::Json(deployment(1, 1))),
        step(Method::PATCH, SCALE, 200, Answer::Echo),
        step(Method::POST, EVENTS, 201, Answer::Echo),
        step(Method::PATCH, STATUS, 200, Answer::WithStatus),
    ]);
    // Stopped before the period's next decision (at 60 s): only a wake can have decided.
    let bodies = clock_until(Gateway::new(step_up), steps, STEP_AT_S + WITHIN_S).await;
    let scale = &bodies[bodies.len() - 3];
    assert_eq!(scale["spec"]["replicas"], 2, "{scale}");
    let event = &bodies[bodies.len() - 2];
    assert_eq!(event["reason"], "PanicScaleUp", "{event}");
    let status = bodies.last().expect("a status write");
    assert_eq!(status["status"]["desiredReplicas"], 2);
    assert_eq!(
        status["status"]["lastDecision"]["reason"], "PanicScaleUp",
        "{status}"
    );
}

#[tokio::test(start_paused = true)]
async fn noise_between_periods_wakes_nothing() {
    // 50 s of noise: no decision but the first (the period's next is at 60 s).
    let bodies = clock_until(Gateway::new(noisy), first_steps(), 50.0).await;
    let status = bodies.last().expect("a status write");
    assert_eq!(status["status"]["desiredReplicas"], 1, "{status}");
}
