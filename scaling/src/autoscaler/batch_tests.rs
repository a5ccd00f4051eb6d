//! Batch work through `decide`: replicas are added only for what the idle capacity does not
//! cover, kept while the batches need them and let go after, and batch work keeps a fleet
//! from scaling to zero under it. Replicas are ready at once here (the startup lift is the
//! pure function's, tested in `batch`); capacity stays at the hint (no completions to learn
//! from).

use std::time::Duration;

use super::*;

const PERIOD_S: f64 = 10.0;
/// Learned capacity per replica (the hint), output tokens/s; planned at 80%.
const C: f64 = 1_000.0;

fn spec(min: u32) -> PolicySpec {
    let mut spec = PolicySpec::new(
        min,
        100,
        Slo {
            ttft_p95_s: 1.0,
            tpot_p95_s: 0.05,
        },
    );
    spec.initial_tokens_per_s_per_gpu = Some(C);
    spec.scale_down_stabilization = Duration::from_secs(60);
    spec
}

/// `current` ready replicas, `interactive` output tokens/s arriving (100 a request), and a
/// batch requiring `required` tokens/s with `backlog` left.
fn obs(current: u32, interactive: f64, required: f64, backlog: f64) -> Observations {
    let rate = |v| WindowedRate {
        stable: v,
        panic: v,
    };
    Observations {
        ready_replicas: current,
        pending_replicas: 0,
        current_replicas: current,
        demand: Some(Demand {
            output_tokens_per_s: rate(interactive),
            arrival_requests_per_s: rate(interactive / 100.0),
            mean_output_tokens_per_request: Some(100.0),
            running_requests: (interactive / 100.0) as u64,
            batch: BatchDemand {
                required_output_tokens_per_s: required,
                backlog_output_tokens: backlog,
                ..BatchDemand::default()
            },
            ..Demand::default()
        }),
        ttft_p95_s: Some(0.4),
        tpot_p95_s: Some(0.02),
        replica_loads: Vec::new(),
        concurrency_cap: None,
    }
}

/// Runs `periods` decisions from `start` replicas, each period's observation from
/// `(period, replicas)`; returns the decisions.
fn run(
    spec: &PolicySpec,
    start: u32,
    periods: u32,
    mut observe: impl FnMut(u32, u32) -> Observations,
) -> Vec<Decision> {
    let mut state = PolicyState::new(spec).seen_since(-1_000.0);
    let mut current = start;
    (0..periods)
        .map(|p| {
            let d = decide(
                spec,
                &observe(p, current),
                &mut state,
                f64::from(p) * PERIOD_S,
            );
            current = d.replicas;
            d
        })
        .collect()
}

fn counts(decisions: &[Decision]) -> Vec<u32> {
    decisions.iter().map(|d| d.replicas).collect()
}

#[test]
fn an_ample_batch_changes_no_decision() {
    // 8,500 tokens/s need 11 replicas at 800 each; at the knee they leave 2,500 idle.
    let spec = spec(1);
    let without = run(&spec, 11, 60, |_, n| obs(n, 8_500.0, 0.0, 0.0));
    let with = run(&spec, 11, 60, |_, n| {
        obs(n, 8_500.0, 2_000.0, 2_000.0 * 3_600.0)
    });
    assert_eq!(counts(&with), counts(&without));
    assert!(
        counts(&with).iter().all(|&n| n == 11),
        "{:?}",
        counts(&with)
    );
    assert!(
        with[0].message.contains("batches need 2000 tokens/s"),
        "{}",
        with[0].message
    );
}

#[test]
fn a_tight_batch_adds_its_shortfall_keeps_it_and_lets_it_go_after() {
    // 5,000 tokens/s required, 2,500 idle: 3 more replicas, for 30 periods; then done.
    let spec = spec(1);
    let decisions = run(&spec, 11, 60, |p, n| {
        if p < 30 {
            obs(n, 8_500.0, 5_000.0, 5_000.0 * 3_600.0)
        } else {
            obs(n, 8_500.0, 0.0, 0.0)
        }
    });
    let replicas = counts(&decisions);
    assert_eq!(decisions[0].replicas, 14, "{}", decisions[0].message);
    assert_eq!(decisions[0].reason, DecisionReason::ScaleUpForBatch);
    assert!(decisions[0].message.contains("+3 replicas for them"));
    assert!(replicas[..30].iter().all(|&n| n == 14), "{replicas:?}");
    // Done: the stabilisation window (60 s) remembers them, then they go, a step at a time.
    assert!(replicas[30..36].iter().all(|&n| n == 14), "{replicas:?}");
    assert_eq!(*replicas.last().expect("decisions"), 11, "{replicas:?}");
}

#[test]
fn interactive_demand_falling_under_a_batch_keeps_what_the_batch_needs() {
    // Interactive falls from 8,500 to 2,000 tokens/s (3 replicas, 1,000 idle) while a batch
    // needs 4,900 for the hour left: the fleet settles at 3 + 4 (3,900 short, lifted by
    // 3,600 / 3,540 for the startup: 3,966), not at 3.
    let spec = spec(1);
    let decisions = run(&spec, 14, 120, |p, n| {
        let interactive = if p < 10 { 8_500.0 } else { 2_000.0 };
        obs(n, interactive, 4_900.0, 4_900.0 * 3_600.0)
    });
    let replicas = counts(&decisions);
    assert_eq!(*replicas.last().expect("decisions"), 7, "{replicas:?}");
    assert!(replicas.iter().all(|&n| n >= 7), "{replicas:?}");
}

#[test]
fn batch_work_keeps_a_fleet_from_zero_and_wakes_one_there() {
    let mut spec = spec(0);
    spec.scale_to_zero_after = Some(Duration::from_secs(60));
    // No interactive traffic, a batch 1,500 tokens/s behind: 2 replicas, never zero.
    let decisions = run(&spec, 1, 40, |_, n| obs(n, 0.0, 1_500.0, 1e7));
    assert!(
        counts(&decisions).iter().all(|&n| n == 2),
        "{:?}",
        counts(&decisions)
    );
    // At zero, a batch with work left starts a replica at once.
    let first = run(&spec, 0, 1, |_, n| obs(n, 0.0, 10.0, 1e5));
    assert_eq!(first[0].reason, DecisionReason::ScaleFromZero);
    assert_eq!(first[0].replicas, 1);
    // Once the batch is done, the idle time runs out and the fleet goes to zero.
    let after = run(&spec, 2, 20, |_, n| obs(n, 0.0, 0.0, 0.0));
    assert_eq!(*counts(&after).last().expect("decisions"), 0);
}

#[test]
fn capacity_does_not_probe_up_while_batch_lines_share_the_replicas() {
    // 11 replicas at 773 tokens/s each with p95s at 40% of the SLO: headroom at the planned
    // load, so the estimate creeps up; not while a batch runs on the same replicas (its lines
    // fill what interactive traffic leaves, the headroom is theirs).
    let spec = spec(1);
    let with_completions = |required: f64| {
        move |_, n| {
            let mut o = obs(n, 8_500.0, required, required * 3_600.0);
            if let Some(d) = o.demand.as_mut() {
                d.completed_requests = 5_000;
            }
            o
        }
    };
    let capacity = |d: &[Decision]| {
        d.last()
            .and_then(|d| d.capacity_tokens_per_s_per_replica)
            .expect("capacity known")
    };
    let alone = run(&spec, 11, 60, with_completions(0.0));
    assert!(capacity(&alone) > C, "{}", capacity(&alone));
    let shared = run(&spec, 11, 60, with_completions(1_000.0));
    assert_eq!(capacity(&shared), C);
}

#[test]
fn a_required_rate_that_has_not_held_for_a_startup_adds_nothing() {
    // A one-period spike (a batch inside its margin reads as due in a second) adds nothing; a
    // rise that holds adds replicas once it has held for the 60 s startup.
    let spec = spec(1);
    let decisions = run(&spec, 11, 50, |p, n| {
        let required = match p {
            20 => 500_000.0,
            30.. => 5_000.0,
            _ => 1_000.0,
        };
        obs(n, 8_500.0, required, 2e8)
    });
    let replicas = counts(&decisions);
    assert!(replicas[..36].iter().all(|&n| n == 11), "{replicas:?}");
    assert!(replicas[36..].iter().all(|&n| n == 14), "{replicas:?}");
}
