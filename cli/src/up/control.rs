//! The control loop of `tokenscale up`: each period, scrape the gateway's (and the ready
//! engines') `/metrics`, tick the operator's scaling loop with them and the process pool's
//! counts, apply the tick to the pool, and print one status line.

use std::time::Duration;

use tokenscale_gateway::routing::ColdStart;
use tokenscale_scaling::autoscaler::{Clocks, ConcurrencyCap, Decision, PolicySpec};
use tokenscale_scaling::metrics_source::readings::read;
use tokenscale_scaling::metrics_source::text_format::parse;
use tokenscale_scaling::metrics_source::{MetricsView, ModelRef, ScrapeRound, ScrapeTargets};
use tokenscale_scaling::scale::{ReplicaCounts, ScaleTarget};
use tokenscale_scaling::scaling::attainment::Attainment;
use tokenscale_scaling::scaling::{ScalingLoop, apply};

use super::pool::ProcessPool;
use super::probe::Probe;
use super::targets::LocalTargets;

/// The loop's memory between periods.
pub struct Controller {
    pub model: String,
    /// What each scrape reads: the gateway and the ready replicas.
    pub targets: LocalTargets,
    pub pool: ProcessPool,
    pub probe: Probe,
    /// The same loop the operator ticks: policy, metrics windows, SLO record.
    scaling: ScalingLoop,
}

impl Controller {
    /// A controller for `model` under `spec`.
    pub fn new(
        model: String,
        spec: PolicySpec,
        gateway_metrics_url: String,
        pool: ProcessPool,
    ) -> Self {
        Self {
            model,
            targets: LocalTargets {
                gateway_metrics_url,
                pool: pool.clone(),
            },
            pool,
            probe: Probe::new(),
            scaling: ScalingLoop::new(spec),
        }
    }

    /// One period at `now_s` (a monotonic clock): scrape, tick, apply; returns the status line.
    pub async fn period(&mut self, now_s: f64) -> String {
        let round = self.scrape().await;
        let counts = self.counts().await;
        let unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let tick = self
            .scaling
            .tick(Clocks::from_unix_s(now_s, unix_s), &round, counts);
        match apply(&tick, &self.pool).await {
            Ok(marked) => self.scaling.note_marked(marked),
            Err(error) => tracing::error!(%error, "scaling the process pool"),
        }
        let seconds = |s: f64| Duration::try_from_secs_f64(s).ok();
        self.pool.set_cold_start(ColdStart {
            expected: self.scaling.expected_cold_start_s().and_then(seconds),
            ttft_slo: seconds(self.scaling.spec().slo.ttft_p95_s).unwrap_or_default(),
        });
        status_line(
            &self.model,
            self.scaling.spec(),
            (counts.ready, tick.target_replicas),
            tick.lead_time_s,
            &tick.view,
            &tick.decision,
            tick.attainment,
        )
    }

    /// Between periods: one scrape folded into the metrics windows. Sampled only at each
    /// period, the panic window (6 s by default, shorter than the 10 s period) would in effect
    /// be a whole period wide; `sim` showed what that costs (operator/README.md). At zero
    /// replicas, a request that waits or arrives makes it a whole period at once (its status
    /// line returned): the first requests do not wait for the next period. Nor does a rise
    /// that two scrapes in a row show outgrowing the replicas ready and starting
    /// (`ScalingLoop::rise_seen`).
    pub async fn sample(&mut self, now_s: f64) -> Option<String> {
        let round = self.scrape().await;
        self.scaling.record(now_s, &round);
        let counts = self.counts().await;
        // Replica starts timed to the second, not to the period.
        self.scaling.observe_counts(now_s, counts);
        if self.scaling.wants_a_first_replica(now_s, counts)
            || self.scaling.rise_seen(now_s, counts)
        {
            Some(self.period(now_s).await)
        } else {
            None
        }
    }

    /// The process pool's counts now (none when it cannot say).
    async fn counts(&self) -> ReplicaCounts {
        self.pool
            .replicas()
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// One scrape round: the gateway, and every ready engine (their load, for the choice of
    /// which replica a scale-in drains).
    async fn scrape(&self) -> ScrapeRound {
        let mut round = ScrapeRound::default();
        let spec = self.scaling.spec();
        let model = ModelRef {
            namespace: String::new(),
            service: self.model.clone(),
            served_name: self.model.clone(),
            stable_s: spec.stable_window.as_secs_f64(),
            panic_s: spec.panic_window.as_secs_f64(),
        };
        for target in self.targets.scrape_targets(&model).await {
            let (name, kind) = (target.name, target.kind);
            match self.probe.get(&target.url).await {
                Some((200, text)) => round.readings.push((
                    name,
                    kind,
                    read(kind, &parse(&text).samples, &self.model),
                )),
                _ => round.failed += 1,
            }
        }
        round
    }
}

/// `model  replicas 2/3  lead 60s  412 tok/s  ttft p95 120ms/500ms  tpot p95 12ms/50ms  cap
/// engine 12 (2/2 at cap)  slo 1h 98.3% 24h 99.1%  goodput 190 tok/s/gpu  ScaleUp: ...`
/// (`replicas` ready/desired; `lead` the time to capacity the policy planned with; `cap` the
/// replicas' concurrency cap, only when they report one; attainment and goodput as the
/// operator's status reports them, `-` before any minute was judged).
pub fn status_line(
    model: &str,
    spec: &PolicySpec,
    (ready, desired): (u32, u32),
    lead_time_s: f64,
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
        "{model}  replicas {ready}/{desired}  lead {lead_time_s:.0}s  {tokens_per_s:.0} tok/s  ttft p95 {}/{}  tpot p95 {}/{}{}  slo 1h {} 24h {}  goodput {goodput} tok/s/gpu  {}: {}",
        ms(view.ttft_p95_s),
        ms(Some(spec.slo.ttft_p95_s)),
        ms(view.tpot_p95_s),
        ms(Some(spec.slo.tpot_p95_s)),
        cap_text(view.concurrency_cap.as_ref()),
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

/// `  cap engine 12 (2/2 at cap)`: the replicas' mean concurrency cap, who sets it and how
/// many run at it; empty when none reports one.
fn cap_text(cap: Option<&ConcurrencyCap>) -> String {
    cap.map_or(String::new(), |c| {
        format!(
            "  cap {} {:.0} ({}/{} at cap)",
            c.source.as_str(),
            c.per_replica,
            c.at_cap,
            c.replicas
        )
    })
}

#[cfg(test)]
mod tests {
    use tokenscale_scaling::autoscaler::{DecisionReason, Slo};
    use tokenscale_scaling::scaling::attainment::{PeriodSample, SloHistory};

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
            (2, 2),
            75.0,
            &view,
            &decision,
            slo.attainment(t0 + 200.0),
        );
        assert!(
            line.contains("slo 1h 75.0% 24h 75.0%  goodput 142 tok/s/gpu"),
            "{line}"
        );
        assert!(line.contains("replicas 2/2  lead 75s  "), "{line}");
        let blank = status_line(
            "m",
            &spec,
            (0, 1),
            60.0,
            &view,
            &decision,
            Attainment::default(),
        );
        assert!(
            blank.contains("slo 1h - 24h -  goodput - tok/s/gpu"),
            "{blank}"
        );
        assert!(!blank.contains("cap "), "no cap reported: {blank}");
        let capped = MetricsView {
            concurrency_cap: Some(ConcurrencyCap {
                replicas: 2,
                per_replica: 12.0,
                in_use_per_replica: 12.0,
                at_cap: 2,
                ..ConcurrencyCap::default()
            }),
            ..MetricsView::default()
        };
        let line = status_line(
            "m",
            &spec,
            (2, 2),
            60.0,
            &capped,
            &decision,
            Attainment::default(),
        );
        assert!(
            line.contains("tpot p95 -/50ms  cap engine 12 (2/2 at cap)  slo"),
            "{line}"
        );
    }
}
