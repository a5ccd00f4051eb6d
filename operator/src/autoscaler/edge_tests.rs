//! Direct tests of single decisions at the policy's edges: a step is not a trend, the bounds
//! are named, a stuck pending replica is called out but not replaced, zero needs idleness.

use std::time::Duration;

use super::*;

fn spec() -> PolicySpec {
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
fn obs(ready: u32, pending: u32, tokens_per_s: f64) -> Observations {
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
        }),
        ttft_p95_s: Some(0.4),
        tpot_p95_s: Some(0.02),
        replica_loads: Vec::new(),
    }
}

#[test]
fn a_step_is_not_extrapolated_but_a_steady_rise_is() {
    let mut state = PolicyState::default();
    for k in 0..6 {
        state.demand_trend(f64::from(k) * 10.0, 60.0, 1000.0);
    }
    assert_eq!(state.demand_trend(60.0, 60.0, 5000.0), 0.0);

    let mut state = PolicyState::default();
    let mut rise = 0.0;
    for k in 0..7 {
        rise = state.demand_trend(f64::from(k) * 10.0, 60.0, 1000.0 + 50.0 * f64::from(k));
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
