//! Property tests of the policy over seeded random inputs (a small generator instead of a
//! property-testing dependency): bounds always hold, nothing scales down while a p95 is over
//! the SLO, and constant demand converges to one replica count that then stays.

use std::time::Duration;

use super::tests::World;
use super::*;

/// A seeded LCG; plenty for input generation.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        self.next() as f64 / f64::from(u32::MAX) / 2.0
    }
    fn maybe(&mut self, value: f64) -> Option<f64> {
        (self.below(5) != 0).then_some(value)
    }
}

fn random_spec(g: &mut Gen) -> PolicySpec {
    let min = g.below(4) as u32;
    let max = min + g.below(40) as u32;
    let mut spec = PolicySpec::new(
        min,
        max,
        Slo {
            ttft_p95_s: 0.2 + 2.0 * g.unit(),
            tpot_p95_s: 0.01 + 0.1 * g.unit(),
        },
    );
    spec.target_utilization = 0.5 + 0.5 * g.unit();
    spec.initial_tokens_per_s_per_gpu = (g.below(4) != 0).then(|| 100.0 + 5000.0 * g.unit());
    spec.scale_to_zero_after = (g.below(2) == 0).then(|| Duration::from_secs(g.below(300)));
    spec
}

fn random_observations(g: &mut Gen, spec: &PolicySpec, current: u32) -> Observations {
    let ready = g.below(u64::from(current) + 1) as u32;
    let (tokens, ttft, tpot) = (
        50.0 + 500.0 * g.unit(),
        spec.slo.ttft_p95_s * 2.0 * g.unit(),
        spec.slo.tpot_p95_s * 2.0 * g.unit(),
    );
    let demand = Demand {
        output_tokens_per_s: WindowedRate {
            stable: 20_000.0 * g.unit(),
            panic: 40_000.0 * g.unit(),
        },
        arrival_requests_per_s: WindowedRate {
            stable: 100.0 * g.unit(),
            panic: 200.0 * g.unit(),
        },
        mean_output_tokens_per_request: g.maybe(tokens),
        queued_requests: g.below(3) * g.below(500),
        running_requests: g.below(200),
        completed_requests: g.below(1000),
        source: Default::default(),
        batch: BatchDemand::default(),
    };
    Observations {
        ready_replicas: ready,
        pending_replicas: current - ready,
        current_replicas: current,
        demand: (g.below(6) != 0).then_some(demand),
        ttft_p95_s: g.maybe(ttft),
        tpot_p95_s: g.maybe(tpot),
        replica_loads: Vec::new(),
        concurrency_cap: None,
    }
}

#[test]
fn replicas_stay_within_bounds_and_never_drop_while_over_the_slo() {
    let mut g = Gen(42);
    for _case in 0..300 {
        let spec = random_spec(&mut g);
        let mut state = PolicyState::new(&spec);
        let mut current = spec.min_replicas
            + g.below(u64::from(spec.max_replicas - spec.min_replicas) + 1) as u32;
        for period in 0..60 {
            let obs = random_observations(&mut g, &spec, current);
            let d = decide(&spec, &obs, &mut state, f64::from(period) * 10.0);
            assert!(
                d.replicas >= spec.min_replicas && d.replicas <= spec.max_replicas,
                "{spec:?}\n{obs:?}\n{d:?}"
            );
            if slo_ratio(&spec, &obs).is_some_and(|r| r > 1.0) {
                assert!(
                    d.replicas >= current,
                    "scaled down over the SLO:\n{obs:?}\n{d:?}"
                );
            }
            assert!(!d.message.is_empty());
            current = d.replicas;
        }
    }
}

#[test]
fn constant_demand_converges_and_stays() {
    let mut g = Gen(7);
    for _case in 0..60 {
        let start = 1 + g.below(30) as u32;
        let hint = 0.5 + 1.5 * g.unit();
        let mut world = World::new(start, hint);
        world.true_capacity = 500.0 + 2000.0 * g.unit();
        let demand = 20_000.0 * g.unit() + 100.0;
        for _ in 0..400 {
            world.step(demand);
        }
        let replicas = world.replicas();
        let tail = &replicas[replicas.len() - 60..];
        assert!(
            tail.iter().all(|&r| r == tail[0]),
            "did not settle (hint {hint:.2}, demand {demand:.0}, capacity {:.0}): {replicas:?}",
            world.true_capacity
        );
        let need = (demand / world.true_capacity).ceil() as u32;
        assert!(
            tail[0] >= need,
            "settled below the need {need}: {replicas:?}"
        );
    }
}

#[test]
fn batch_work_only_adds_replicas_and_none_when_idle_covers_it() {
    let mut g = Gen(2024);
    for _case in 0..300 {
        let mut spec = random_spec(&mut g);
        spec.max_replicas = spec.max_replicas.max(spec.min_replicas + 20);
        let mut state = PolicyState::new(&spec);
        let mut current = spec.min_replicas.max(1);
        for period in 0..30 {
            let now_s = f64::from(period) * 10.0;
            let obs = random_observations(&mut g, &spec, current);
            let required = 20_000.0 * g.unit();
            let mut with = obs.clone();
            if let Some(d) = with.demand.as_mut() {
                d.batch.required_output_tokens_per_s = required;
                d.batch.backlog_output_tokens = required * 3_600.0;
            }
            // From the same memory: the one decision with the batch against the one without.
            let plain = decide(&spec, &obs, &mut state.clone(), now_s);
            let batched = decide(&spec, &with, &mut state, now_s);
            assert!(
                batched.replicas >= plain.replicas,
                "batch work lowered the count:\n{with:?}\n{plain:?}\n{batched:?}"
            );
            // Batch work also keeps a fleet from zero and wakes one there (`zero`).
            let zero_edge = plain.reason == DecisionReason::ScaleToZero
                || batched.reason == DecisionReason::ScaleFromZero;
            if !batched.message.contains("replicas for them") && !zero_edge {
                assert_eq!(batched.replicas, plain.replicas, "{batched:?}\n{plain:?}");
            }
            current = batched.replicas;
        }
    }
}
