//! Direct tests of single decisions at the policy's edges: a step is not a trend, the bounds
//! are named, a stuck pending replica is called out but not replaced, zero needs idleness.

use std::time::Duration;

use super::*;

pub(super) fn spec() -> PolicySpec {
    let mut spec = PolicySpec::new(
        1,
        100,
        Slo {
            ttft_p95_s: 1.0,
            tpot_p95_s: 0.05,
        },
    );
    spec.initial_tokens_per_s_per_gpu = Some(1000.0);
    spec
}

/// Observations with `tokens_per_s` offered and served, all replicas ready unless `pending`.
pub(super) fn obs(ready: u32, pending: u32, tokens_per_s: f64) -> Observations {
    let rate = WindowedRate {
        stable: tokens_per_s,
        panic: tokens_per_s,
    };
    Observations {
        ready_replicas: ready,
        pending_replicas: pending,
        current_replicas: ready + pending,
        demand: Some(Demand {
            output_tokens_per_s: rate,
            arrival_requests_per_s: WindowedRate {
                stable: tokens_per_s / 100.0,
                panic: tokens_per_s / 100.0,
            },
            mean_output_tokens_per_request: Some(100.0),
            queued_requests: 0,
            running_requests: 4,
            completed_requests: 100,
            source: Default::default(),
            batch: BatchDemand::default(),
        }),
        ttft_p95_s: Some(0.4),
        tpot_p95_s: Some(0.02),
        replica_loads: Vec::new(),
        concurrency_cap: None,
    }
}

/// The trend of this period's demand, then the period kept, as a decision does.
fn trend(state: &mut PolicyState, now_s: f64, tokens_per_s: f64) -> f64 {
    let slope = state.demand_trend(now_s, 60.0, tokens_per_s);
    state.record_demand(now_s, 60.0, tokens_per_s);
    slope
}

#[test]
fn a_step_is_not_extrapolated_but_a_steady_rise_is() {
    let mut state = PolicyState::default();
    for k in 0..6 {
        trend(&mut state, f64::from(k) * 10.0, 1000.0);
    }
    assert_eq!(trend(&mut state, 60.0, 5000.0), 0.0);

    let mut state = PolicyState::default();
    let mut rise = 0.0;
    for k in 0..7 {
        rise = trend(
            &mut state,
            f64::from(k) * 10.0,
            1000.0 + 50.0 * f64::from(k),
        );
    }
    assert!((rise - 5.0).abs() < 1e-9, "rise {rise} tokens/s per s");
}

#[test]
fn clamping_at_max_is_reported_as_bounded() {
    let mut spec = spec();
    spec.max_replicas = 5;
    let mut state = PolicyState::new(&spec);
    let d = decide(&spec, &obs(3, 0, 20_000.0), &mut state, 0.0);
    assert_eq!(
        (d.replicas, d.reason),
        (5, DecisionReason::Bounded),
        "{}",
        d.message
    );
    assert!(d.message.contains("max 5"), "{}", d.message);
}

#[test]
fn a_stuck_pending_replica_is_named_and_not_replaced() {
    let spec = spec();
    let mut state = PolicyState::new(&spec);
    let startup_s = spec.startup_time.as_secs_f64();
    let mut last = None;
    for k in 0..40 {
        // 2 ready serve their full capacity; the third never becomes ready.
        let d = decide(&spec, &obs(2, 1, 2200.0), &mut state, f64::from(k) * 10.0);
        assert_eq!(d.replicas, 3, "{}", d.message);
        last = Some(d);
    }
    let last = last.expect("decided");
    assert!(40.0 * 10.0 > 3.0 * startup_s);
    assert!(last.message.contains("not ready for"), "{}", last.message);
}

#[test]
fn no_plain_scale_down_goes_to_zero() {
    let mut spec = spec();
    spec.min_replicas = 0;
    spec.scale_to_zero_after = Some(Duration::from_secs(600));
    let mut state = PolicyState::new(&spec);
    for k in 0..40 {
        let mut o = obs(1, 0, 0.0);
        if let Some(d) = o.demand.as_mut() {
            d.running_requests = 0;
        }
        let d = decide(&spec, &o, &mut state, f64::from(k) * 10.0);
        assert_eq!(d.replicas, 1, "{}", d.message);
    }
}

#[test]
fn a_ramp_is_not_called_stuck_while_its_replicas_arrive() {
    let spec = spec();
    let mut state = PolicyState::new(&spec);
    // Thirty periods of a ramp: one replica always starting, a new one ready every 3 periods.
    for k in 0..30u32 {
        let ready = 2 + k / 3;
        let d = decide(
            &spec,
            &obs(ready, 1, 800.0 * f64::from(ready)),
            &mut state,
            f64::from(k) * 10.0,
        );
        assert!(!d.message.contains("not ready for"), "{}", d.message);
    }
}

/// Observations of a short spike that broke the window's p95 while the window mean stayed
/// at `mean` tokens/s: `peak` is the spike seen by the short window.
fn spiked(ready: u32, mean: f64, peak: f64, broken: bool) -> Observations {
    let mut o = obs(ready, 0, mean);
    if let Some(d) = o.demand.as_mut() {
        d.output_tokens_per_s.panic = peak;
    }
    if broken {
        o.ttft_p95_s = Some(1.5);
    }
    o
}

#[test]
fn a_spike_that_breaks_the_p95_is_learned_at_its_peak_not_the_window_mean() {
    let spec = spec();
    let mut state = PolicyState::new(&spec);
    // Ten replicas at 760 tokens/s each (95% of the 800 planned), settled for a window.
    for k in 0..8 {
        decide(
            &spec,
            &spiked(10, 7600.0, 7600.0, false),
            &mut state,
            f64::from(k) * 10.0,
        );
    }
    // A 20 s spike to 1,300 tokens/s per replica; the minute's p95 breaks afterwards.
    decide(
        &spec,
        &spiked(10, 7600.0, 13_000.0, false),
        &mut state,
        80.0,
    );
    decide(
        &spec,
        &spiked(10, 7600.0, 13_000.0, false),
        &mut state,
        90.0,
    );
    for k in 10..14 {
        decide(
            &spec,
            &spiked(10, 8000.0, 7600.0, true),
            &mut state,
            f64::from(k) * 10.0,
        );
    }
    let capacity = state.capacity_tokens_per_s_per_replica.unwrap_or(0.0);
    // The mean (800 per replica) would have pulled the estimate down toward 800; the spike ran
    // above the estimate, so it stands.
    assert!(capacity >= 1000.0, "capacity {capacity}");
}

#[test]
fn light_load_latency_headroom_does_not_raise_the_capacity() {
    let spec = spec();
    let mut state = PolicyState::new(&spec);
    // Three replicas at 600 tokens/s each (75% of the plan), p95 TPOT at 44% of its target:
    // scaled to the planned load that is 59%, not enough headroom to probe.
    for k in 0..60 {
        let mut o = obs(3, 0, 1800.0);
        o.tpot_p95_s = Some(0.022);
        o.ttft_p95_s = Some(0.1);
        decide(&spec, &o, &mut state, f64::from(k) * 10.0);
    }
    let capacity = state.capacity_tokens_per_s_per_replica.unwrap_or(0.0);
    assert!((capacity - 1000.0).abs() < 1e-9, "capacity {capacity}");
    // The same latency at the planned load is real headroom: the estimate creeps up.
    let mut state = PolicyState::new(&spec);
    for k in 0..60 {
        let mut o = obs(3, 0, 2400.0);
        o.tpot_p95_s = Some(0.022);
        o.ttft_p95_s = Some(0.1);
        decide(&spec, &o, &mut state, f64::from(k) * 10.0);
    }
    let capacity = state.capacity_tokens_per_s_per_replica.unwrap_or(0.0);
    assert!(capacity > 1000.0, "capacity {capacity}");
}

#[test]
fn a_rise_that_levelled_off_is_not_extrapolated() {
    let spec = spec();
    // The stable mean still climbs (it trails by half a window) but the short window shows the
    // demand has stopped at 6,000 tokens/s: plan for about that, not for the extrapolation.
    let plan = |levelled: bool| {
        let mut state = PolicyState::new(&spec).seen_since(-1000.0);
        let mut last = None;
        for k in 0..8u32 {
            let mean = 4000.0 + 250.0 * f64::from(k);
            let mut o = obs(8, 0, mean);
            if let Some(d) = o.demand.as_mut() {
                let panic = if levelled { 5000.0 } else { mean + 750.0 };
                d.output_tokens_per_s.panic = panic;
                // Arrivals are the demand: 100 output tokens a request.
                d.arrival_requests_per_s.panic = panic / 100.0;
            }
            last = Some(decide(&spec, &o, &mut state, f64::from(k) * 10.0));
        }
        last.expect("decided").replicas
    };
    let (rising, levelled) = (plan(false), plan(true));
    assert!(levelled < rising, "levelled {levelled}, rising {rising}");
    // 5,750 tokens/s at 800 per replica.
    assert_eq!(levelled, 8);
}

#[test]
fn a_steady_fall_is_planned_where_it_is_not_where_the_window_mean_trails() {
    let spec = spec();
    let mut state = PolicyState::new(&spec).seen_since(-1000.0);
    let mut last = None;
    // The stable mean falls 20 tokens/s every second; it trails the present by half a window
    // (30 s), so the present is 600 tokens/s below it.
    for k in 0..8u32 {
        let mean = 9600.0 - 200.0 * f64::from(k);
        last = Some((
            mean,
            decide(&spec, &obs(12, 0, mean), &mut state, f64::from(k) * 10.0),
        ));
    }
    let (mean, d) = last.expect("decided");
    let planned = d.demand_tokens_per_s.unwrap_or(f64::NAN);
    assert!(
        (planned - (mean - 600.0)).abs() < 1.0,
        "planned {planned}, mean {mean}"
    );
}

#[test]
fn gateway_arrivals_reach_the_needed_count_in_one_decision_completions_step() {
    // Demand of 20 replicas at target (1000 tokens/s each at 80%) on a fleet of 3.
    let spec = spec();
    let mut state = PolicyState::new(&spec);
    let d = decide(&spec, &obs(3, 0, 16_000.0), &mut state, 0.0);
    assert_eq!(d.replicas, 20, "{}", d.message);

    // Without a gateway, completions are capped by the capacity that exists: one step at a
    // time, at most max(2×, +4).
    let mut engines = obs(3, 0, 16_000.0);
    if let Some(demand) = engines.demand.as_mut() {
        demand.source = DemandSource::EngineCompletions;
    }
    let mut state = PolicyState::new(&spec);
    let d = decide(&spec, &engines, &mut state, 0.0);
    assert_eq!(d.replicas, 7, "{}", d.message);
}

#[test]
fn replicas_added_for_a_backlog_are_not_held_once_it_drains() {
    let spec = spec();
    let mut state = PolicyState::new(&spec).seen_since(-1000.0);
    // 4 replicas' worth of demand and a backlog of 3,000 requests (300,000 tokens): more.
    let mut backlog = obs(4, 0, 3_000.0);
    if let Some(demand) = backlog.demand.as_mut() {
        demand.queued_requests = 3_000;
    }
    let up = decide(&spec, &backlog, &mut state, 0.0);
    assert!(up.replicas > 4, "{}", up.message);
    // The queue is gone 30 s later, within the stabilisation window: the level is what holds.
    let drained = decide(&spec, &obs(up.replicas, 0, 3_000.0), &mut state, 30.0);
    assert!(drained.replicas < up.replicas, "{}", drained.message);
}

#[test]
fn a_draining_backlog_is_not_demand_when_arrivals_are_counted() {
    // A fleet just ready after a flash crowd serves 8,000 tokens/s while it drains the
    // queue, but only 4,000 tokens/s arrive: with gateway arrivals it plans for 4,000.
    let spec = spec();
    let mut state = PolicyState::new(&spec).seen_since(-1000.0);
    let mut draining = obs(10, 0, 8_000.0);
    if let Some(demand) = draining.demand.as_mut() {
        demand.arrival_requests_per_s = WindowedRate {
            stable: 40.0,
            panic: 40.0,
        };
    }
    let d = decide(&spec, &draining, &mut state, 0.0);
    assert_eq!(d.demand_tokens_per_s, Some(4_000.0), "{}", d.message);
    // From engine completions (capped by capacity) the served figure still counts.
    if let Some(demand) = draining.demand.as_mut() {
        demand.source = DemandSource::EngineCompletions;
    }
    let mut state = PolicyState::new(&spec).seen_since(-1000.0);
    let d = decide(&spec, &draining, &mut state, 0.0);
    assert_eq!(d.demand_tokens_per_s, Some(8_000.0), "{}", d.message);
}

#[test]
fn a_break_while_a_burst_still_arrives_teaches_no_knee() {
    let spec = spec();
    let mut state = PolicyState::new(&spec);
    // Ten replicas at 760 tokens/s each, settled for a window.
    for k in 0..8 {
        decide(&spec, &obs(10, 0, 7600.0), &mut state, f64::from(k) * 10.0);
    }
    let before = state.capacity_tokens_per_s_per_replica.unwrap_or(0.0);
    // A burst: arrivals in the short window at 2.5× the minute's, a queue, the p95 broken,
    // and the served throughput still the minute's (completions lag the arrivals).
    let mut onset = obs(10, 0, 7600.0);
    if let Some(d) = onset.demand.as_mut() {
        d.arrival_requests_per_s.panic = 190.0;
        d.queued_requests = 400;
    }
    onset.ttft_p95_s = Some(2.0);
    decide(&spec, &onset, &mut state, 80.0);
    let capacity = state.capacity_tokens_per_s_per_replica.unwrap_or(0.0);
    assert_eq!(capacity, before, "a burst's onset is no knee");
    // The same break under steady arrivals (replicas saturated by their own load) is one.
    if let Some(d) = onset.demand.as_mut() {
        d.arrival_requests_per_s.panic = 76.0;
    }
    decide(&spec, &onset, &mut state, 90.0);
    let capacity = state.capacity_tokens_per_s_per_replica.unwrap_or(0.0);
    assert!(capacity < before, "capacity {capacity}");
}

#[test]
fn a_break_right_after_a_scale_in_is_learned_and_headroom_then_is_not() {
    let spec = spec();
    // Two replicas at 1,500 tokens/s held the SLO with a capacity learned too high (2,000 a
    // replica), so the fleet scaled in to one; a period later that one breaks the SLO.
    let after_scale_in = |ttft_p95_s: f64, tokens_per_s: f64| {
        let mut state = PolicyState::new(&spec).seen_since(-1000.0);
        for k in 0..12 {
            let mut o = obs(2, 0, 1500.0);
            o.ttft_p95_s = Some(0.6);
            decide(&spec, &o, &mut state, f64::from(k) * 10.0);
        }
        state.capacity_tokens_per_s_per_replica = Some(2000.0);
        state.last_scale_in = Some((115.0, 2));
        let mut o = obs(1, 0, tokens_per_s);
        o.ttft_p95_s = Some(ttft_p95_s);
        decide(&spec, &o, &mut state, 130.0);
        state.capacity_tokens_per_s_per_replica.unwrap_or(0.0)
    };
    // The count changed 15 s ago, well inside the 60 s window the p95s cover; the break is
    // still the one replica's (the window before held two): learned at once, not after the
    // scale-up it causes has reset the window.
    let broken = after_scale_in(1.6, 1500.0);
    assert!(broken < 2000.0, "capacity {broken}");
    // Headroom in that mixed window is the two replicas': nothing learned up from it.
    let held = after_scale_in(0.3, 2400.0);
    assert!((held - 2000.0).abs() < 1e-9, "capacity {held}");
}
