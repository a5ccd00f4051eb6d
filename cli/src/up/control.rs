//! The control loop of `tokenscale up`: each period, scrape the gateway's (and the ready
//! engines') `/metrics`, fold them into the operator's metrics memory, run the operator's
//! `decide`, act on the process pool, and print one status line.

use tokenscale_operator::autoscaler::{Decision, Observations, PolicySpec, PolicyState, decide};
use tokenscale_operator::metrics_source::readings::read;
use tokenscale_operator::metrics_source::text_format::parse;
use tokenscale_operator::metrics_source::{MetricsView, ModelMetrics, ScrapeRound, TargetKind};
use tokenscale_operator::scale::ScaleTarget;

use super::pool::ProcessPool;
use super::probe::Probe;

/// The loop's memory between periods.
pub struct Controller {
    pub model: String,
    pub spec: PolicySpec,
    pub gateway_metrics_url: String,
    pub pool: ProcessPool,
    pub probe: Probe,
    metrics: ModelMetrics,
    policy: PolicyState,
    last: Option<Decision>,
}

impl Controller {
    /// A controller for `model` under `spec`.
    pub fn new(
        model: String,
        spec: PolicySpec,
        gateway_metrics_url: String,
        pool: ProcessPool,
    ) -> Self {
        let policy = PolicyState::new(&spec);
        Self {
            model,
            spec,
            gateway_metrics_url,
            pool,
            probe: Probe::new(),
            metrics: ModelMetrics::default(),
            policy,
            last: None,
        }
    }

    /// One period at `now_s` (a monotonic clock): observe, decide, act; returns the status line.
    pub async fn period(&mut self, now_s: f64) -> String {
        let view = self.observe(now_s).await;
        let counts = self
            .pool
            .replicas()
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let observations = Observations {
            ready_replicas: counts.ready,
            pending_replicas: counts.current.saturating_sub(counts.ready),
            current_replicas: counts.desired,
            demand: view.demand.clone(),
            ttft_p95_s: view.ttft_p95_s,
            tpot_p95_s: view.tpot_p95_s,
            replica_loads: view.replica_loads.clone(),
        };
        let decision = decide(&self.spec, &observations, &mut self.policy, now_s);
        if decision.replicas != counts.desired {
            if decision.replicas < counts.desired {
                let _ = self.pool.mark_for_removal(&view.replica_loads).await;
            }
            if let Err(error) = self.pool.set_replicas(decision.replicas).await {
                tracing::error!(%error, "scaling the process pool");
            }
        }
        let line = status_line(
            &self.model,
            &self.spec,
            counts.ready,
            decision.replicas,
            &view,
            &decision,
        );
        self.last = Some(decision);
        line
    }

    async fn observe(&mut self, now_s: f64) -> MetricsView {
        let mut round = ScrapeRound::default();
        let mut targets = vec![(
            "gateway".to_string(),
            self.gateway_metrics_url.clone(),
            TargetKind::Gateway,
        )];
        for (name, url) in self.pool.ready_urls().await {
            targets.push((name, format!("{url}/metrics"), TargetKind::Engine));
        }
        for (name, url, kind) in targets {
            match self.probe.get(&url).await {
                Some((200, text)) => round.readings.push((
                    name,
                    kind,
                    read(kind, &parse(&text).samples, &self.model),
                )),
                _ => round.failed += 1,
            }
        }
        let (stable_s, panic_s) = (
            self.spec.stable_window.as_secs_f64(),
            self.spec.panic_window.as_secs_f64(),
        );
        let period_s = self.spec.period.as_secs_f64();
        self.metrics
            .record(now_s, &round, stable_s + 3.0 * period_s);
        self.metrics.view(now_s, stable_s, panic_s, 3.0 * period_s)
    }
}

/// `model  replicas 2/3  412 tok/s  ttft p95 120ms/500ms  tpot p95 12ms/50ms  ScaleUp: ...`
pub fn status_line(
    model: &str,
    spec: &PolicySpec,
    ready: u32,
    desired: u32,
    view: &MetricsView,
    decision: &Decision,
) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{:.0}ms", s * 1e3));
    let tokens_per_s = view
        .demand
        .as_ref()
        .map_or(0.0, |d| d.output_tokens_per_s.stable);
    let line = format!(
        "{model}  replicas {ready}/{desired}  {tokens_per_s:.0} tok/s  ttft p95 {}/{}  tpot p95 {}/{}  {}: {}",
        ms(view.ttft_p95_s),
        ms(Some(spec.slo.ttft_p95_s)),
        ms(view.tpot_p95_s),
        ms(Some(spec.slo.tpot_p95_s)),
        decision.reason,
        decision.message
    );
    if view.missing.is_empty() {
        line
    } else {
        format!("{line}; decided without {}", view.missing.join("; "))
    }
}
