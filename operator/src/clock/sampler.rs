//! Samples between decisions: every model's metrics are scraped each second and folded into
//! its scaling loop's windows, as `tokenscale up` and `tokenscale sim` do; a rise the scrapes
//! show wakes the model's decision at once, as there.
//!
//! Sampled only when a model decides (once a period, 10 s by default), the 6 s panic window
//! held one sample and the stable window six: a burst was seen a period late, and the rates
//! were differences of two points a period apart. Knative's autoscaler scrapes every second
//! for the same reason. With a Prometheus source the windows are Prometheus's own (its
//! queries take rates over them), so there is nothing to sample. The scaling clock
//! ([`super::ticker`]) calls [`sample`] at each tick.

use futures::future::join_all;

use crate::controller::Context;
use crate::metrics_source::Observed;

/// One round: scrapes every model the controller has reconciled (concurrently) and folds
/// each answer into that model's windows at the time it came back.
pub async fn sample(ctx: &Context) {
    let models = ctx.clock.models().sampled();
    let rounds = join_all(
        models
            .iter()
            .map(|(_, model)| ctx.metrics_source.observe(model)),
    )
    .await;
    let now_s = ctx.now_s();
    let mut entries = ctx.clock.models();
    for ((key, _), observed) in models.iter().zip(rounds) {
        if let (Observed::Round(round), Some(entry)) = (observed, entries.get_mut(key)) {
            entry.scaling.record(now_s, &round);
            // A rise two scrapes in a row show wakes the decision now, not at the next
            // period (`ScalingLoop::rise_seen`); the clock decides right after this round.
            if let Some(counts) = entry.scaling.counts_after_last_tick()
                && entry.scaling.rise_seen(now_s, counts)
            {
                entry.due.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures::future::BoxFuture;
    use http::{Request, Response};
    use kube::Client;
    use kube::client::Body;
    use tokenscale_common::metrics::gateway;
    use tokenscale_common::prom_text::Sample;

    use super::*;
    use crate::autoscaler::{PolicySpec, Slo};
    use crate::controller::{Settings, lock, model_key};
    use crate::crd::ModelDeployment;
    use crate::metrics_source::readings::read;
    use crate::metrics_source::{MetricsSource, ModelRef, Observed, ScrapeRound, TargetKind};
    use crate::scaling::ScalingLoop;
    use crate::telemetry::Metrics;

    /// A gateway whose arrivals counter grows by 10 at every scrape; it notes who was asked.
    #[derive(Default)]
    struct GrowingGateway {
        scrapes: AtomicU32,
        asked: Mutex<Vec<String>>,
    }

    impl MetricsSource for GrowingGateway {
        fn scrapes(&self) -> bool {
            true
        }
        fn observe<'a>(&'a self, model: &'a ModelRef) -> BoxFuture<'a, Observed> {
            Box::pin(async move {
                crate::controller::lock(&self.asked).push(model.served_name.clone());
                let n = self.scrapes.fetch_add(1, Ordering::SeqCst) + 1;
                let sample = Sample {
                    name: gateway::ARRIVALS_TOTAL.into(),
                    labels: vec![("model_name".into(), model.served_name.clone())],
                    value: 10.0 * f64::from(n),
                };
                let reading = read(TargetKind::Gateway, &[sample], &model.served_name);
                Observed::Round(ScrapeRound {
                    readings: vec![("gateway".into(), TargetKind::Gateway, reading)],
                    failed: 0,
                })
            })
        }
    }

    fn context(source: Arc<dyn MetricsSource>) -> Context {
        let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        Context::new(
            Client::new(service, "ns"),
            Arc::new(Metrics::default()),
            source,
            Settings::default(),
        )
    }

    fn md(name: &str) -> ModelDeployment {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "tokenscale.dev/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "model": {"source": "smollm2-135m-instruct"},
                "engine": {"backend": "cpu"},
                "replicas": {"min": 1, "max": 3},
                "slo": {"ttftP95": "500ms", "tpotP95": "50ms"}
            }
        }))
        .expect("test object parses")
    }

    /// Puts a fresh loop for `md` in `ctx`, with its metrics location when `located`.
    fn known(ctx: &Context, md: &ModelDeployment, located: bool) {
        let slo = Slo {
            ttft_p95_s: 0.5,
            tpot_p95_s: 0.05,
        };
        ctx.put_loop(md, ScalingLoop::new(PolicySpec::new(1, 3, slo)));
        let served = md.metadata.name.clone().expect("named");
        let metrics = located.then(|| ModelRef {
            namespace: "ns".into(),
            service: served.clone(),
            served_name: served,
            stable_s: 60.0,
            panic_s: 6.0,
        });
        ctx.clock
            .models()
            .get_mut(&model_key(md))
            .expect("just put")
            .metrics = metrics;
    }

    fn arrivals(ctx: &Context, md: &ModelDeployment) -> Option<f64> {
        let mut models = ctx.clock.models();
        let entry = models.get_mut(&model_key(md))?;
        let demand = entry.scaling.view(ctx.now_s()).demand?;
        Some(demand.arrival_requests_per_s.panic)
    }

    #[tokio::test]
    async fn samples_between_decisions_fill_the_windows_of_every_located_model() {
        let source = Arc::new(GrowingGateway::default());
        let ctx = context(source.clone());
        let (a, unlocated) = (md("a"), md("b"));
        known(&ctx, &a, true);
        known(&ctx, &unlocated, false);
        assert_eq!(arrivals(&ctx, &a), None, "no sample yet: no rate");

        sample(&ctx).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        sample(&ctx).await;

        let rate = arrivals(&ctx, &a).expect("two samples make a rate");
        assert!(rate > 0.0, "arrivals between the samples: {rate}");
        // Only the model whose metrics location is known was scraped, once per round.
        assert_eq!(*lock(&source.asked), ["a", "a"]);
        assert_eq!(arrivals(&ctx, &unlocated), None);
    }
}
