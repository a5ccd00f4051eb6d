//! The pipeline's stages one by one: what each outputs (reasons and numbers, not prose), and
//! that only `remember` writes the policy's memory.

use std::time::Duration;

use super::decide::decide;
use super::edge_tests::{obs, spec};
use super::estimate::estimate;
use super::stabilise::{Hold, Move, Rise, reason, stabilise};
use super::target::{Target, target};
use super::*;

/// Runs the three pure stages on `state`.
fn stages(
    spec: &PolicySpec,
    obs: &Observations,
    state: &PolicyState,
    now_s: f64,
) -> (Target, stabilise::Stabilised) {
    let estimate = estimate(spec, obs, state, now_s);
    let target = target(spec, obs, state, &estimate, now_s);
    let stabilised = stabilise(spec, obs, state, &estimate, &target, now_s);
    (target, stabilised)
}

#[test]
fn the_stages_read_the_memory_and_only_remember_writes_it() {
    let spec = spec();
    let mut state = PolicyState::new(&spec);
    for k in 0..12 {
        let o = obs(3, 0, 2_000.0 + 100.0 * f64::from(k));
        let before = state.clone();
        let (target, _) = stages(&spec, &o, &state, f64::from(k) * 10.0);
        assert_eq!(state, before, "a stage wrote the memory");
        assert!(matches!(target, Target::Replicas(_)));
        decide(&spec, &o, &mut state, f64::from(k) * 10.0);
        assert_ne!(state, before, "remember keeps the period");
    }
}

#[test]
fn a_demand_past_max_is_sized_then_bounded() {
    let mut spec = spec();
    spec.max_replicas = 5;
    let state = PolicyState::new(&spec);
    let (target, st) = stages(&spec, &obs(3, 0, 20_000.0), &state, 0.0);
    let Target::Replicas(sized) = target else {
        panic!("sized: {target:?}");
    };
    // 20,000 tokens/s at 1,000 per replica and 0.8 target utilisation.
    assert_eq!(spec.target_utilization, 0.8);
    assert_eq!(sized.raw, 25);
    assert_eq!(st.step, Move::Up(Rise::Demand));
    assert_eq!((st.wanted, st.replicas), (25, 5));
    assert_eq!(reason(&st), DecisionReason::Bounded);
}

#[test]
fn missing_metrics_hold_and_keep_only_the_replica_tracking() {
    let spec = spec();
    let mut state = PolicyState::new(&spec);
    let mut o = obs(4, 0, 0.0);
    o.demand = None;
    let (target, st) = stages(&spec, &o, &state, 5.0);
    assert_eq!(target, Target::MissingMetrics);
    assert_eq!(
        (st.step, st.replicas),
        (Move::Hold(Hold::MissingMetrics), 4)
    );
    let d = decide(&spec, &o, &mut state, 5.0);
    assert_eq!(
        (d.reason, d.demand_tokens_per_s),
        (DecisionReason::HoldMissingMetrics, None)
    );
    let fresh = PolicyState::new(&spec).seen_since(5.0);
    assert_eq!(
        state.capacity_tokens_per_s_per_replica,
        fresh.capacity_tokens_per_s_per_replica
    );
    assert_eq!(state.idle_since_s, None);
}

#[test]
fn idleness_past_the_time_is_a_to_zero_target_with_its_length() {
    let mut spec = spec();
    spec.min_replicas = 0;
    spec.scale_to_zero_after = Some(Duration::from_secs(300));
    let mut state = PolicyState::new(&spec);
    let mut idle = obs(2, 0, 0.0);
    if let Some(d) = idle.demand.as_mut() {
        d.running_requests = 0;
    }
    decide(&spec, &idle, &mut state, 100.0);
    let (target, st) = stages(&spec, &idle, &state, 450.0);
    assert_eq!(target, Target::ToZero { idle_for_s: 350.0 });
    assert_eq!((st.step, st.replicas), (Move::ToZero, 0));
    assert_eq!(reason(&st), DecisionReason::ScaleToZero);
}

#[test]
fn a_fall_within_the_window_holds_at_the_highest_recommendation() {
    let mut spec = spec();
    spec.scale_down_stabilization = Duration::from_secs(300);
    let mut state = PolicyState::new(&spec).seen_since(-1_000.0);
    // 10 replicas were needed a minute ago (8,000 tokens/s at 800 per replica); 3 do now.
    decide(&spec, &obs(9, 0, 8_000.0), &mut state, 0.0);
    let (target, st) = stages(&spec, &obs(9, 0, 2_000.0), &state, 60.0);
    let Target::Replicas(sized) = target else {
        panic!("sized: {target:?}");
    };
    assert!(sized.raw < 9, "raw {}", sized.raw);
    assert_eq!(st.step, Move::Hold(Hold::Stabilizing));
    assert_eq!((st.stabilized, st.replicas, st.window_s), (10, 9, 300.0));
    assert_eq!(reason(&st), DecisionReason::Stabilizing);
}

#[test]
fn a_burst_within_arrival_noise_does_not_panic_one_replica() {
    let spec = spec();
    let state = PolicyState::new(&spec);
    let burst = |panic_tokens_per_s: f64| {
        let mut o = obs(1, 0, 700.0);
        let demand = o.demand.as_mut().expect("demand");
        demand.output_tokens_per_s.panic = panic_tokens_per_s;
        demand.arrival_requests_per_s.panic = panic_tokens_per_s / 100.0;
        let (target, st) = stages(&spec, &o, &state, 0.0);
        let Target::Replicas(sized) = target else {
            panic!("sized: {target:?}");
        };
        (sized.panicking, st.replicas)
    };
    // 7 requests/s: 42 expected in the 6 s window (σ ≈ 6.5); 51 is noise, though at 0.8 of
    // 1,000 tokens/s it needs 2× the one ready replica.
    assert_eq!(burst(850.0), (false, 1));
    // 2,000 tokens/s (120 arrivals) is a burst.
    let (panicking, replicas) = burst(2_000.0);
    assert!(panicking);
    assert_eq!(replicas, 3);
}

#[test]
fn a_demand_within_arrival_noise_of_the_boundary_holds() {
    let spec = spec();
    let state = PolicyState::new(&spec);
    // Three replicas carry 2,400 tokens/s at 0.8; 24.5 requests/s over a minute is 1,470
    // arrivals, whose mean wanders by 2.6% (1σ): 2,450 tokens/s is noise, 2,700 is not.
    let (_, st) = stages(&spec, &obs(3, 0, 2_450.0), &state, 0.0);
    assert_eq!(st.step, Move::Hold(Hold::WithinNoise));
    assert_eq!((st.replicas, reason(&st)), (3, DecisionReason::Steady));
    let (_, st) = stages(&spec, &obs(3, 0, 2_700.0), &state, 0.0);
    assert_eq!((st.step, st.replicas), (Move::Up(Rise::Demand), 4));
    // With the p95 near the SLO the same noise scales up.
    let mut hot = obs(3, 0, 2_450.0);
    hot.ttft_p95_s = Some(0.9);
    let (_, st) = stages(&spec, &hot, &state, 0.0);
    assert_eq!((st.step, st.replicas), (Move::Up(Rise::Demand), 4));
}
