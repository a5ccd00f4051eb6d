//! The knee read at the cap: the pure rules, then a closed loop in which a fleet that caps its
//! batch at the TPOT target teaches the policy its capacity without one SLO-break period,
//! against today's fleet (no cap reported), whose capacity is found only by breaking the SLO.

use std::time::Duration;

use super::*;
use crate::autoscaler::{
    BatchDemand, Observations, PolicySpec, PolicyState, Slo, WindowedRate, decide,
};

fn demand(tokens_per_s: f64, queued: u64) -> Demand {
    Demand {
        output_tokens_per_s: WindowedRate {
            stable: tokens_per_s,
            panic: tokens_per_s,
        },
        queued_requests: queued,
        ..Demand::default()
    }
}

fn caps(replicas: u32, at_cap: u32) -> ConcurrencyCap {
    (0..replicas)
        .map(|i| ConcurrencyCap::one(CapSource::Engine, 16.0, if i < at_cap { 16.0 } else { 4.0 }))
        .reduce(ConcurrencyCap::merge)
        .unwrap_or_default()
}

#[test]
fn the_knee_is_read_only_where_every_replica_runs_at_its_cap_with_requests_waiting() {
    let all = caps(4, 4);
    assert_eq!((all.replicas, all.at_cap, all.per_replica), (4, 4, 16.0));
    assert_eq!(
        knee_tokens_per_s(Some(&all), &demand(4000.0, 3), 4, Some(0.9)),
        Some(1000.0)
    );
    // Below the cap, no queue, the TPOT over its target, no cap at all: nothing learned.
    let cases = [
        knee_tokens_per_s(Some(&caps(4, 3)), &demand(3000.0, 3), 4, Some(0.9)),
        knee_tokens_per_s(Some(&all), &demand(4000.0, 0), 4, Some(0.9)),
        knee_tokens_per_s(Some(&all), &demand(4000.0, 3), 4, Some(1.2)),
        knee_tokens_per_s(None, &demand(4000.0, 3), 4, Some(0.9)),
        knee_tokens_per_s(Some(&all), &demand(4000.0, 3), 0, None),
    ];
    assert_eq!(cases, [None; 5]);
}

#[test]
fn batch_lines_inside_the_cap_count_in_its_throughput() {
    let mut d = demand(3000.0, 2);
    d.batch = BatchDemand {
        output_tokens_per_s: WindowedRate {
            stable: 1000.0,
            panic: 1000.0,
        },
        ..BatchDemand::default()
    };
    assert_eq!(
        knee_tokens_per_s(Some(&caps(2, 2)), &d, 2, None),
        Some(2000.0)
    );
}

#[test]
fn the_estimate_moves_toward_the_knee_both_ways() {
    assert_eq!(learn_at_knee(None, 900.0), 900.0);
    assert_eq!(learn_at_knee(Some(1600.0), 1000.0), 1300.0);
    assert_eq!(learn_at_knee(Some(800.0), 1000.0), 900.0);
}

const PERIOD_S: f64 = 10.0;
const COLD_START_PERIODS: u32 = 3;
const TOKENS_PER_REQUEST: f64 = 200.0;
/// What one replica sustains within the TPOT target (its knee), tokens/s.
const KNEE: f64 = 1000.0;
/// What it reaches when nothing caps its batch (TPOT far over the target).
const UNCAPPED: f64 = 1600.0;
const SLO: Slo = Slo {
    ttft_p95_s: 1.0,
    tpot_p95_s: 0.05,
};

/// A toy fleet: with `capped`, each replica holds its batch at the TPOT target (our engine
/// with `--tpot-target`), reports the cap, and the excess waits; without, the batch grows past
/// the knee and the TPOT breaks.
struct Fleet {
    capped: bool,
    ready: u32,
    starting: Vec<u32>,
    queued_tokens: f64,
}

impl Fleet {
    fn observe(&mut self, offered: f64) -> (Observations, bool) {
        let n = f64::from(self.ready);
        let limit = n * if self.capped { KNEE } else { UNCAPPED };
        let served = (offered + self.queued_tokens / PERIOD_S).min(limit);
        self.queued_tokens = (self.queued_tokens + (offered - served) * PERIOD_S).max(0.0);
        let per_replica = served / n;
        let tpot = SLO.tpot_p95_s * (0.45 + 0.5 * (per_replica / KNEE).powi(2));
        let ttft = 0.2 + self.queued_tokens / served.max(1.0);
        let in_use = 16.0 * (per_replica / KNEE).min(1.0);
        let cap = ConcurrencyCap {
            replicas: self.ready,
            per_replica: 16.0,
            in_use_per_replica: in_use,
            at_cap: if per_replica >= 0.999 * KNEE {
                self.ready
            } else {
                0
            },
            ..ConcurrencyCap::default()
        };
        let obs = Observations {
            ready_replicas: self.ready,
            pending_replicas: self.starting.len() as u32,
            current_replicas: self.ready + self.starting.len() as u32,
            demand: Some(Demand {
                arrival_requests_per_s: WindowedRate {
                    stable: offered / TOKENS_PER_REQUEST,
                    panic: offered / TOKENS_PER_REQUEST,
                },
                mean_output_tokens_per_request: Some(TOKENS_PER_REQUEST),
                running_requests: (n * in_use) as u64,
                completed_requests: (served / TOKENS_PER_REQUEST * 60.0) as u64,
                ..demand(
                    served,
                    (self.queued_tokens / TOKENS_PER_REQUEST).round() as u64,
                )
            }),
            ttft_p95_s: Some(ttft),
            tpot_p95_s: Some(tpot),
            replica_loads: Vec::new(),
            concurrency_cap: self.capped.then_some(cap),
        };
        (obs, ttft > SLO.ttft_p95_s || tpot > SLO.tpot_p95_s)
    }

    fn apply(&mut self, desired: u32, period: u32) {
        let current = self.ready + self.starting.len() as u32;
        if desired > current {
            self.starting
                .extend(std::iter::repeat_n(period, (desired - current) as usize));
        } else if desired < current {
            let mut cut = current - desired;
            while cut > 0 && self.starting.pop().is_some() {
                cut -= 1;
            }
            self.ready -= cut.min(self.ready - 1);
        }
        let before = self.starting.len();
        self.starting
            .retain(|&start| period + 1 < start + COLD_START_PERIODS);
        self.ready += (before - self.starting.len()) as u32;
    }
}

/// Two hours of demand rising slowly from 4,000 to 8,000 tokens/s with a hint 1.6× the true
/// knee: `(SLO-break periods, capacity at the end)`.
fn run(capped: bool) -> (u32, f64) {
    let mut spec = PolicySpec::new(1, 100, SLO);
    spec.initial_tokens_per_s_per_gpu = Some(1.6 * KNEE);
    spec.scale_down_stabilization = Duration::from_secs(120);
    let mut state = PolicyState::new(&spec);
    let mut fleet = Fleet {
        capped,
        ready: 4,
        starting: Vec::new(),
        queued_tokens: 0.0,
    };
    let mut broken = 0;
    for period in 0..720u32 {
        let offered = 4000.0 + 4000.0 * (f64::from(period) / 360.0).min(1.0);
        let (obs, slo_broken) = fleet.observe(offered);
        broken += u32::from(slo_broken);
        let decision = decide(&spec, &obs, &mut state, f64::from(period) * PERIOD_S);
        fleet.apply(decision.replicas, period);
    }
    (
        broken,
        state.capacity_tokens_per_s_per_replica.unwrap_or(0.0),
    )
}

#[test]
fn with_a_cap_reported_capacity_converges_to_the_caps_throughput_without_breaking_the_slo() {
    let (broken_today, capacity_today) = run(false);
    let (broken_knee, capacity_knee) = run(true);
    println!(
        "true knee {KNEE:.0} tokens/s per replica, hint {:.0}; two hours, 10 s periods\n\
         today (no cap, found by breaking): {broken_today} SLO-break periods, capacity {capacity_today:.0}\n\
         at the cap (the knee):             {broken_knee} SLO-break periods, capacity {capacity_knee:.0}",
        1.6 * KNEE
    );
    assert!(
        broken_today > 0,
        "today's policy finds the knee by breaking"
    );
    assert_eq!(
        broken_knee, 0,
        "the cap shows the knee before the SLO breaks"
    );
    assert!(
        (capacity_knee - KNEE).abs() <= 0.05 * KNEE,
        "capacity {capacity_knee} is the cap's throughput {KNEE}"
    );
}
