//! Tests of the scaling loop: one definition of pending, the tick's arithmetic on scrape
//! rounds, the budget hook, and the shell against a recording scale target.

use std::sync::Mutex;

use tokenscale_common::metrics::gateway;
use tokenscale_common::prom_text::Sample;

use super::*;
use crate::autoscaler::{Clocks, DecisionReason, PolicySpec, ReplicaLoad, Slo, restore, snapshot};
use crate::metrics_source::readings::read;
use crate::metrics_source::{ScrapeRound, TargetKind};
use crate::scale::{ReplicaCounts, ScaleError, ScaleTarget};

const MODEL: &str = "m";
/// 2026-01-01T00:00:00Z, so minutes are whole.
const UNIX_T0_S: f64 = 1_767_225_600.0;

pub(super) fn spec() -> PolicySpec {
    let mut spec = PolicySpec::new(
        1,
        10,
        Slo {
            ttft_p95_s: 0.5,
            tpot_p95_s: 0.05,
        },
    );
    spec.initial_tokens_per_s_per_gpu = Some(100.0);
    spec
}

pub(super) fn clocks(now_s: f64) -> Clocks {
    Clocks::from_unix_s(now_s, UNIX_T0_S + now_s)
}

pub(super) fn counts(desired: u32, current: u32, ready: u32) -> ReplicaCounts {
    ReplicaCounts {
        desired,
        current,
        ready,
    }
}

fn sample(name: &str, extra: Option<(&str, &str)>, value: f64) -> Sample {
    let mut labels = vec![("model_name".to_string(), MODEL.to_string())];
    labels.extend(extra.map(|(k, v)| (k.to_string(), v.to_string())));
    Sample {
        name: name.to_string(),
        labels,
        value,
    }
}

/// The gateway's exposition after `t_s` seconds of `rps` requests/s of 100 output tokens,
/// all answered fast, with `queued` waiting.
pub(super) fn gateway_round(t_s: f64, rps: f64, queued: f64) -> ScrapeRound {
    let requests = rps * t_s;
    let ttft = format!("{}_bucket", gateway::TIME_TO_FIRST_TOKEN_SECONDS);
    let tpot = format!("{}_bucket", gateway::TIME_PER_OUTPUT_TOKEN_SECONDS);
    let samples = [
        sample(gateway::ARRIVALS_TOTAL, None, requests),
        sample(gateway::REQUESTS_TOTAL, None, requests),
        sample(gateway::GENERATION_TOKENS_TOTAL, None, 100.0 * requests),
        sample(gateway::QUEUE_DEPTH, None, queued),
        sample(&ttft, Some(("le", "0.1")), requests),
        sample(&ttft, Some(("le", "+Inf")), requests),
        sample(&tpot, Some(("le", "0.01")), requests),
        sample(&tpot, Some(("le", "+Inf")), requests),
    ];
    ScrapeRound {
        readings: vec![(
            "gateway".into(),
            TargetKind::Gateway,
            read(TargetKind::Gateway, &samples, MODEL),
        )],
        failed: 0,
    }
}

/// Ticks `lp` every period for `periods` periods from `t0_s` at `rps`, with `counts`.
fn run(lp: &mut ScalingLoop, t0_s: f64, periods: u32, rps: f64, counts: ReplicaCounts) -> Tick {
    let period_s = lp.spec().period.as_secs_f64();
    let mut last = None;
    for i in 0..periods {
        let t_s = t0_s + f64::from(i) * period_s;
        last = Some(lp.tick(clocks(t_s), &gateway_round(t_s, rps, 0.0), counts));
    }
    last.expect("at least one period")
}

#[test]
fn pending_is_what_was_ordered_and_does_not_serve_yet() {
    // Two starting pods and one not created yet (no node): all three are on the way.
    assert_eq!(pending_replicas(counts(5, 4, 2)), 3);
    // A scale-in in progress: the extra pods are going, not coming.
    assert_eq!(pending_replicas(counts(2, 4, 3)), 0);
    let obs = observations(counts(5, 4, 2), &Default::default());
    assert_eq!(
        (
            obs.ready_replicas,
            obs.pending_replicas,
            obs.current_replicas
        ),
        (2, 3, 5)
    );
}

#[test]
fn a_scale_in_marks_only_the_ready_replicas_that_go() {
    // 4 → 2 with one pod not ready: it goes first, then one ready one.
    assert_eq!(ready_to_mark(counts(4, 4, 3), 2), 1);
    assert_eq!(ready_to_mark(counts(4, 4, 4), 2), 2);
    assert_eq!(ready_to_mark(counts(4, 4, 1), 2), 0, "only unready ones go");
    assert_eq!(ready_to_mark(counts(2, 2, 2), 3), 0, "not a scale-in");
}

#[test]
fn without_metrics_the_loop_holds_and_judges_no_minute() {
    let mut lp = ScalingLoop::new(spec());
    let tick = lp.tick(clocks(0.0), &ScrapeRound::default(), counts(3, 3, 3));
    assert_eq!(tick.decision.reason, DecisionReason::HoldMissingMetrics);
    assert_eq!((tick.target_replicas, tick.scales()), (3, false));
    assert_eq!(tick.attainment.last_hour, None);
}

#[test]
fn demand_from_the_gateway_sizes_the_fleet_and_the_slo_is_recorded() {
    let mut lp = ScalingLoop::new(spec());
    // 4 requests/s × 100 tokens = 400 tokens/s.
    let tick = run(&mut lp, 0.0, 8, 4.0, counts(1, 1, 1));
    let demand = tick.observations.demand.as_ref().expect("fresh metrics");
    assert!((demand.arrival_requests_per_s.stable - 4.0).abs() < 1e-9);
    assert_eq!(demand.mean_output_tokens_per_request, Some(100.0));
    // One replica served it within the SLO, so capacity is learned up to it: 2 replicas.
    assert_eq!(tick.decision.demand_tokens_per_s, Some(400.0));
    assert_eq!(tick.target_replicas, 2, "{:?}", tick.decision);
    assert!(tick.scales() && !tick.scales_in());
    assert_eq!(
        tick.attainment.last_hour,
        Some(1.0),
        "fast answers meet the SLO"
    );
    assert_eq!(
        lp.last().map(|t| t.target_replicas),
        Some(tick.target_replicas)
    );
}

#[test]
fn the_same_inputs_give_the_same_ticks() {
    let (mut a, mut b) = (ScalingLoop::new(spec()), ScalingLoop::new(spec()));
    for (lp, name) in [(&mut a, "a"), (&mut b, "b")] {
        let tick = run(lp, 0.0, 12, 2.5, counts(2, 2, 2));
        assert!(tick.observations.demand.is_some(), "{name}");
    }
    let (ta, tb) = (a.last().expect("ticked"), b.last().expect("ticked"));
    assert_eq!(ta.decision, tb.decision);
    assert_eq!(ta.observations, tb.observations);
}

#[test]
fn a_budget_grant_replaces_the_target_and_its_marks() {
    let mut lp = ScalingLoop::new(spec());
    let mut tick = run(&mut lp, 0.0, 8, 4.0, counts(4, 4, 4));
    tick.limit_to(2);
    assert_eq!((tick.target_replicas, tick.mark_for_removal), (2, 2));
    assert!(tick.scales_in());
}

#[test]
fn a_resumed_loop_decides_as_the_one_it_continues() {
    let mut first = ScalingLoop::new(spec());
    run(&mut first, 0.0, 12, 3.0, counts(3, 3, 3));
    let at = clocks(120.0);
    // Another process: its own clock origin, the same wall clock.
    let there = Clocks::from_unix_s(5.0, at.unix_s());
    let policy = restore(&snapshot(first.policy(), at), there);
    let mut second = ScalingLoop::resumed(
        spec(),
        Some(policy),
        first.slo().clone(),
        vec!["pod-a".into()],
    );
    assert_eq!(second.marked_for_removal(), ["pod-a"]);
    // The next period, with the same metrics history on both sides.
    for t_s in [60.0, 70.0, 80.0, 90.0, 100.0, 110.0] {
        second.record(t_s - 115.0, &gateway_round(t_s, 3.0, 0.0));
    }
    let round = gateway_round(120.0, 3.0, 0.0);
    let a = first.tick(at, &round, counts(3, 3, 3));
    let b = second.tick(there, &round, counts(3, 3, 3));
    assert_eq!(a.decision.replicas, b.decision.replicas);
    assert_eq!(
        a.observations
            .demand
            .map(|d| d.arrival_requests_per_s.stable),
        b.observations
            .demand
            .map(|d| d.arrival_requests_per_s.stable)
    );
}

/// A scale target that records what it is asked.
#[derive(Default)]
struct Recording {
    calls: Mutex<Vec<String>>,
}

impl ScaleTarget for Recording {
    async fn replicas(&self) -> Result<Option<ReplicaCounts>, ScaleError> {
        Ok(None)
    }

    async fn set_replicas(&self, replicas: u32) -> Result<(), ScaleError> {
        self.calls
            .lock()
            .expect("not poisoned")
            .push(format!("set {replicas}"));
        Ok(())
    }

    async fn mark_for_removal(&self, _: &[ReplicaLoad]) -> Result<Option<String>, ScaleError> {
        Ok(None)
    }

    async fn mark_many_for_removal(
        &self,
        loads: &[ReplicaLoad],
        count: u32,
        before: &[String],
    ) -> Result<Vec<String>, ScaleError> {
        let plan = crate::scale::removal_plan(loads, count, before);
        let line = format!("mark {:?} clear {:?}", plan.mark, plan.clear);
        self.calls.lock().expect("not poisoned").push(line);
        Ok(plan.mark)
    }
}

fn load(name: &str, running: u64) -> ReplicaLoad {
    ReplicaLoad {
        name: name.into(),
        running_requests: running,
        ..ReplicaLoad::default()
    }
}

#[tokio::test]
async fn apply_marks_before_a_scale_in_and_only_scales_up_otherwise() {
    let mut lp = ScalingLoop::new(spec());
    let mut tick = run(&mut lp, 0.0, 8, 1.0, counts(3, 3, 3));
    tick.view.replica_loads = vec![load("a", 5), load("b", 1), load("c", 3)];
    tick.marked_before = vec!["c".into()];
    tick.limit_to(2);
    let target = Recording::default();
    let marked = apply(&tick, &target).await.expect("recording never fails");
    assert_eq!(marked, ["b"]);
    assert_eq!(
        *target.calls.lock().expect("not poisoned"),
        [r#"mark ["b"] clear ["c"]"#, "set 2"]
    );

    tick.limit_to(4);
    let target = Recording::default();
    let marked = apply(&tick, &target).await.expect("recording never fails");
    assert_eq!(marked, ["c"], "the earlier marks stay in force");
    assert_eq!(*target.calls.lock().expect("not poisoned"), ["set 4"]);
}

/// The gateway's exposition at `t_s` of a ramp: `r0_rps + slope × t` requests/s.
fn ramp_round(t_s: f64, r0_rps: f64, slope: f64) -> ScrapeRound {
    // `gateway_round` counts `rps × t` requests: the ramp's integral, as a mean rate.
    let mean_rps = r0_rps + 0.5 * slope * t_s;
    gateway_round(t_s, mean_rps, 0.0)
}

#[test]
fn a_measured_slow_start_moves_the_lead_time_and_the_plan_with_it() {
    // Two loops with the CRD's default hint (60 s); one has seen a replica take 5 minutes from
    // being asked for to ready.
    let mut hinted = ScalingLoop::new(spec());
    let mut measured = ScalingLoop::new(spec());
    assert_eq!(
        measured.lead_time_s(),
        60.0,
        "the hint until a start is measured"
    );
    measured.observe_counts(-400.0, counts(1, 1, 1));
    measured.observe_counts(-390.0, counts(2, 2, 1));
    assert_eq!(measured.lead_time_s(), 60.0, "still starting");
    measured.observe_counts(-90.0, counts(2, 2, 2));
    assert_eq!(measured.lead_time_s(), 300.0);
    assert_eq!(measured.measured_cold_starts_s(), [300.0]);

    // A steady rise: 1 request/s growing by 0.004 each second, 100 tokens each.
    let (r0, slope) = (1.0, 0.004);
    let period_s = spec().period.as_secs_f64();
    let mut ticks = (None, None);
    for i in 0..60 {
        let t_s = f64::from(i) * period_s;
        let round = ramp_round(t_s, r0, slope);
        ticks = (
            Some(hinted.tick(clocks(t_s), &round, counts(2, 2, 2))),
            Some(measured.tick(clocks(t_s), &round, counts(2, 2, 2))),
        );
    }
    let (hinted, measured) = (ticks.0.expect("ticked"), ticks.1.expect("ticked"));
    assert_eq!((hinted.lead_time_s, measured.lead_time_s), (60.0, 300.0));
    // Both plan the demand a lead time (plus a period and half the window the mean lags by)
    // ahead: the loop that measured 5-minute starts plans 240 s further along the ramp.
    let planned = |t: &Tick| t.decision.demand_tokens_per_s.expect("planned demand");
    let further = planned(&measured) - planned(&hinted);
    let expected = slope * 100.0 * 240.0;
    assert!(
        (further - expected).abs() < 0.1 * expected,
        "planned {} vs {} tokens/s: {further} further, expected {expected}",
        planned(&measured),
        planned(&hinted)
    );
    assert!(
        measured.target_replicas > hinted.target_replicas,
        "{} vs {}",
        measured.target_replicas,
        hinted.target_replicas
    );
}

#[test]
fn the_crd_hint_is_the_lead_time_until_a_start_is_measured() {
    let mut spec = spec();
    spec.startup_time = std::time::Duration::from_secs(420);
    let mut lp = ScalingLoop::new(spec);
    let tick = lp.tick(clocks(0.0), &gateway_round(0.0, 1.0, 0.0), counts(1, 1, 1));
    assert_eq!((lp.lead_time_s(), tick.lead_time_s), (420.0, 420.0));
    lp.observe_counts(10.0, counts(2, 2, 1));
    lp.observe_counts(100.0, counts(2, 2, 2));
    assert_eq!(lp.lead_time_s(), 90.0, "a measured start replaces the hint");
}
