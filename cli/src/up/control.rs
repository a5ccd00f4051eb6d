//! The control loop of `tokenscale up`: each period, scrape the gateway's (and the ready
//! engines') `/metrics`, fold them into the operator's metrics memory, run the operator's
//! `decide`, act on the process pool, and print one status line.

use tokenscale_operator::autoscaler::{Decision, Observations, PolicySpec, PolicyState, decide};
use tokenscale_operator::scaling::attainment::{Attainment, PeriodSample, SloHistory};
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
    /// The SLO's minute-by-minute record, judged as the operator judges it.
    slo: SloHistory,
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
            slo: SloHistory::default(),
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
                let removed = counts.desired - decision.replicas;
                let _ = self
                    .pool
                    .mark_many_for_removal(&view.replica_loads, removed, &[])
                    .await;
            }
            if let Err(error) = self.pool.set_replicas(decision.replicas).await {
                tracing::error!(%error, "scaling the process pool");
            }
        }
        let unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let period = PeriodSample {
            ttft_p95_s: view.ttft_p95_s,
            tpot_p95_s: view.tpot_p95_s,
            output_tokens_per_s: view.demand.as_ref().map(|d| d.output_tokens_per_s.stable),
            gpus: f64::from(counts.ready) * f64::from(self.spec.gpus_per_replica.max(1)),
        };
        self.slo.record(unix_s, &self.spec.slo, period);
        let line = status_line(
            &self.model,
            &self.spec,
            counts.ready,
            decision.replicas,
            &view,
            &decision,
            self.slo.attainment(unix_s),
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

/// `model  replicas 2/3  412 tok/s  ttft p95 120ms/500ms  tpot p95 12ms/50ms  slo 1h 98.3%
/// 24h 99.1%  goodput 190 tok/s/gpu  ScaleUp: ...` (attainment and goodput as the operator's
/// status reports them; `-` before any minute was judged).
pub fn status_line(
    model: &str,
    spec: &PolicySpec,
    ready: u32,
    desired: u32,
    view: &MetricsView,
    decision: &Decision,
    attainment: Attainment,
) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{:.0}ms", s * 1e3));
    let tokens_per_s = view
        .demand
        .as_ref()
        .map_or(0.0, |d| d.output_tokens_per_s.stable);
    let percent = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 1e2));
    let goodput = attainment
        .goodput_tokens_per_s_per_gpu
        .map_or("-".to_string(), |v| format!("{v:.0}"));
    let line = format!(
        "{model}  replicas {ready}/{desired}  {tokens_per_s:.0} tok/s  ttft p95 {}/{}  tpot p95 {}/{}  slo 1h {} 24h {}  goodput {goodput} tok/s/gpu  {}: {}",
        ms(view.ttft_p95_s),
        ms(Some(spec.slo.ttft_p95_s)),
        ms(view.tpot_p95_s),
        ms(Some(spec.slo.tpot_p95_s)),
        percent(attainment.last_hour),
        percent(attainment.last_24h),
        decision.reason,
        decision.message
    );
    if view.missing.is_empty() {
        line
    } else {
        format!("{line}; decided without {}", view.missing.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use tokenscale_operator::autoscaler::{DecisionReason, Slo};

    use super::*;

    #[test]
    fn the_status_line_tells_attainment_and_goodput_as_the_operator_does() {
        let spec = PolicySpec::new(
            1,
            4,
            Slo {
                ttft_p95_s: 0.5,
                tpot_p95_s: 0.05,
            },
        );
        let decision = Decision {
            replicas: 2,
            reason: DecisionReason::Steady,
            message: "2 replicas fit".into(),
            demand_tokens_per_s: None,
            capacity_tokens_per_s_per_replica: None,
            panicking: false,
        };
        let view = MetricsView::default();
        let mut slo = SloHistory::default();
        let t0 = 1_800_000_000.0;
        for (i, ttft) in [0.2, 0.9, 0.3, 0.1].into_iter().enumerate() {
            let period = PeriodSample {
                ttft_p95_s: Some(ttft),
                tpot_p95_s: Some(0.01),
                output_tokens_per_s: Some(380.0),
                gpus: 2.0,
            };
            slo.record(t0 + 60.0 * i as f64, &spec.slo, period);
        }
        let line = status_line(
            "m",
            &spec,
            2,
            2,
            &view,
            &decision,
            slo.attainment(t0 + 200.0),
        );
        assert!(
            line.contains("slo 1h 75.0% 24h 75.0%  goodput 142 tok/s/gpu"),
            "{line}"
        );
        let blank = status_line("m", &spec, 0, 1, &view, &decision, Attainment::default());
        assert!(
            blank.contains("slo 1h - 24h -  goodput - tok/s/gpu"),
            "{blank}"
        );
    }
}
