//! Tests of what the loop does between periods and with the prompt mix: a rise two scrapes
//! show wakes a decision that adds replicas for a step under 2×, and longer prompts raise the
//! demand before any latency moves.

use super::tests::{clocks, counts, gateway_round, spec};
use super::*;
use crate::autoscaler::DecisionReason;
use crate::metrics_source::ScrapeRound;
use crate::metrics_source::readings::keys;

/// 10 requests/s of 100 output tokens until `step_s`, `after_rps` from then: the gateway's
/// exposition at `t_s` (its counters are cumulative, so the round carries the mean rate).
fn step_round(t_s: f64, step_s: f64, after_rps: f64) -> ScrapeRound {
    let requests = 10.0 * t_s.min(step_s) + after_rps * (t_s - step_s).max(0.0);
    gateway_round(t_s, requests / t_s.max(1e-9), 0.0)
}

/// A loop whose replicas serve 1,000 output tokens/s each (800 planned).
fn fast_loop() -> ScalingLoop {
    let mut spec = spec();
    spec.initial_tokens_per_s_per_gpu = Some(1000.0);
    ScalingLoop::new(spec)
}

#[test]
fn a_rise_under_two_times_wakes_a_decision_within_seconds() {
    // 10 → 17 requests/s: 1,000 → 1,700 tokens/s, 2 → 3 replicas at 800 each (a 1.5× step
    // in replicas: the panic threshold of 2× the ready ones never trips).
    let mut lp = fast_loop();
    let two = counts(2, 2, 2);
    let mut woke_at = None;
    for second in 1..=140 {
        let t_s = f64::from(second);
        let round = step_round(t_s, 120.0, 17.0);
        if second % 15 == 0 && second <= 120 {
            let tick = lp.tick(clocks(t_s), &round, two);
            assert_eq!(tick.target_replicas, 2, "steady at {t_s} s");
            continue;
        }
        lp.record(t_s, &round);
        if lp.rise_seen(t_s, two) {
            woke_at = Some(t_s);
            break;
        }
    }
    let woke_at = woke_at.expect("the rise wakes a decision");
    assert!(
        (122.0..=128.0).contains(&woke_at),
        "woke {woke_at} s, the step at 120 s"
    );
    // Not at the next period (135 s): now, and the decision counts the burst window.
    let tick = lp.tick(clocks(woke_at), &step_round(woke_at, 120.0, 17.0), two);
    assert_eq!(tick.target_replicas, 3);
    assert_eq!(tick.decision.reason, DecisionReason::PanicScaleUp);
}

#[test]
fn a_rise_that_replicas_on_the_way_serve_or_noise_wakes_nothing() {
    let mut lp = fast_loop();
    for second in 1..=150 {
        let t_s = f64::from(second);
        let round = step_round(t_s, 120.0, 17.0);
        lp.record(t_s, &round);
        // A third replica is already starting: the rise orders nothing twice.
        assert!(!lp.rise_seen(t_s, counts(3, 3, 2)), "at {t_s} s");
    }
    // A rise of 5% is within noise and rounding.
    let mut steady = fast_loop();
    for second in 1..=150 {
        let t_s = f64::from(second);
        steady.record(t_s, &step_round(t_s, 120.0, 10.5));
        assert!(!steady.rise_seen(t_s, counts(1, 1, 1)), "at {t_s} s");
    }
}

/// `gateway_round` with `prompt_tokens` a request counted on arrival.
fn with_prompts(t_s: f64, rps: f64, prompt_tokens: impl Fn(f64) -> f64) -> ScrapeRound {
    let mut round = gateway_round(t_s, rps, 0.0);
    let total = prompt_tokens(t_s);
    round.readings[0]
        .2
        .counters
        .insert(keys::GW_ARRIVAL_PROMPT_TOKENS.to_string(), total);
    round
}

#[test]
fn longer_prompts_raise_the_demand_before_latency_moves() {
    // 10 requests/s of 100 output tokens; prompts of 300 tokens, then 900 from minute 3.
    let prompts = |t_s: f64| 10.0 * (300.0 * t_s.min(180.0) + 900.0 * (t_s - 180.0).max(0.0));
    let planned = |cost: f64| {
        let mut lp = fast_loop();
        let mut spec = lp.spec().clone();
        spec.prompt_token_cost = cost;
        lp.set_spec(spec);
        let mut demand = Vec::new();
        for period in 1..=24 {
            let t_s = 15.0 * f64::from(period);
            let tick = lp.tick(
                clocks(t_s),
                &with_prompts(t_s, 10.0, prompts),
                counts(2, 2, 2),
            );
            demand.push((tick.decision.demand_tokens_per_s, tick.target_replicas));
        }
        demand
    };
    let weighed = planned(0.3);
    let output_only = planned(0.0);
    // Before the shift both plan the 1,000 output tokens/s on two replicas.
    assert_eq!(weighed[10], output_only[10]);
    assert_eq!(weighed[10].1, 2);
    // A minute after it, the same output tokens/s cost (1 + 0.3·900/100) / (1 + 0.3·300/100)
    // = 3.7 / 1.9 as much: about 1,950 tokens/s of today's mix, three replicas.
    let (demand, replicas) = weighed[23];
    let demand = demand.expect("planned");
    assert!(
        (demand - 1000.0 * 3.7 / 1.9).abs() < 20.0,
        "weighed demand {demand}"
    );
    assert_eq!(replicas, 3);
    assert_eq!(output_only[23].1, 2, "output tokens alone see no change");
}
