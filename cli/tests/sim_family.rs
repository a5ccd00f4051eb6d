//! The autoscaling policy on the trace family (`--trace family:SEED`): workloads drawn from a
//! distribution of shapes (steps, on/off load, ramps, flash crowds, diurnal curves) that the
//! policy was not tuned on, under the simulator's honest defaults (the CRD's 15 s period and
//! 0.8 target utilisation, no capacity hint, start times the policy is not told, drawn with a
//! heavy right tail around the median `--cold-start`). Over 20 seeds with the default H100
//! profile, at three median start times, the targets are:
//! - 15 s: the median seed meets the SLO in ≥ 99% of minutes at ≤ 1.15× the oracle's
//!   GPU-hours, the worst seed ≥ 97% at ≤ 1.30×;
//! - 60 s: median ≥ 97% at ≤ 1.25×, worst ≥ 95% at ≤ 1.40×;
//! - 300 s: every seed beats `tokenscale-fixed-lead` (the policy planning with a fixed 60 s
//!   lead, as before it measured its starts);
//! - every seed at every start time beats `hpa` on both figures.
//!
//! A target not reached is printed as NOT MET with the table over seeds (run with
//! `--nocapture`); the floors the policy does reach are asserted. If this fails, fix the
//! policy, never the seeds or the family.
//!
//! Beside each seed the table prints `reactive:115`: the oracle without foresight, which knows
//! the true capacity and the rate the moment it changes and sizes for 1.15× it, the cost the
//! targets allow. It is what perfect perception and an instant reaction reach without seeing a
//! rise coming; above it, a policy must foresee rises: ramps it can extrapolate and recurrence
//! it can learn, one-off steps and flash crowds it cannot.

use tokenscale::sim::{Comparison, PolicyResult};

const SEEDS: std::ops::RangeInclusive<u64> = 1..=20;

/// Attainment (share of minutes) and cost (× the oracle's GPU-hours) of one figure over seeds.
#[derive(Debug, Clone, Copy)]
struct Bound {
    attainment: f64,
    cost: f64,
}

const fn bound(attainment: f64, cost: f64) -> Bound {
    Bound { attainment, cost }
}

/// One median start time: its target and the floors the policy reaches (with a little room for
/// arithmetic changes elsewhere in the sim; raise them as the policy gets better, never lower
/// them to make a change pass).
struct Start {
    cold_start: &'static str,
    target_median: Option<Bound>,
    target_worst: Option<Bound>,
    floor_median: Bound,
    floor_worst: Bound,
    /// Whether the seeds are run against `tokenscale-fixed-lead` too.
    against_fixed_lead: bool,
    /// Seeds (of 20) that beat `hpa` on both figures, and `tokenscale-fixed-lead`, as reached:
    /// the target is every seed; fewer is printed as NOT MET.
    beats_hpa: usize,
    beats_fixed_lead: usize,
}

const STARTS: [Start; 3] = [
    Start {
        cold_start: "15s",
        target_median: Some(bound(0.99, 1.15)),
        target_worst: Some(bound(0.97, 1.30)),
        // Reached: median 98.06% at 1.199×, worst 97.22%, costliest 1.333×; seed 1 (one or
        // two replicas) costs more than hpa (which misses 4.4 points more minutes on it).
        // `reactive:115`: 98.26% at 1.155×, worst 96.53%; `reactive:125` (the 0.8 target
        // utilisation's headroom): 98.61% at 1.255×. Before a break right after a scale-in
        // was learned: 97.99% at 1.190×.
        // Before capacity stopped learning knees at bursts' onsets, false panics and noise
        // crossings: 98.33% at 1.348×, worst 97.08%, 1.971×, seeds 1, 4 and 18 above hpa
        // (floor 0.98).
        floor_median: bound(0.979, 1.20),
        floor_worst: bound(0.968, 1.34),
        against_fixed_lead: false,
        beats_hpa: 19,
        beats_fixed_lead: 0,
    },
    Start {
        cold_start: "60s",
        target_median: Some(bound(0.97, 1.25)),
        target_worst: Some(bound(0.95, 1.40)),
        // Reached: median 96.39% at 1.292×, worst 94.58%, costliest 1.603×; `reactive:115`:
        // 94.65% at 1.137×, worst 91.11%; `reactive:125`: 95.62% at 1.232×. Before capacity
        // stopped learning knees at bursts' onsets: 97.08% at 1.466×, worst 94.58%, 1.749×
        // (floor 0.968): that median's extra 0.76 points came from a capacity learned 5-30%
        // low, i.e. spare replicas everywhere. Before acting on rises and weighing prompts:
        // 96.39% at 1.395×, worst 94.31%, 1.647×.
        floor_median: bound(0.962, 1.30),
        floor_worst: bound(0.942, 1.61),
        against_fixed_lead: false,
        beats_hpa: 20,
        beats_fixed_lead: 0,
    },
    Start {
        cold_start: "300s",
        target_median: None,
        target_worst: None,
        // Reached: median 91.53% at 1.523×, worst 86.11%, costliest 1.707×; every seed beats
        // the fixed 60 s lead (`reactive:115`: 75.90% at 1.052×). Before capacity stopped
        // learning knees at bursts' onsets: 92.78% at 1.657×, worst 85.83%, 2.070× (floor
        // 0.925), seed 9 below the fixed lead.
        floor_median: bound(0.912, 1.54),
        floor_worst: bound(0.855, 1.71),
        against_fixed_lead: true,
        beats_hpa: 20,
        beats_fixed_lead: 20,
    },
];

/// The reference beside tokenscale: the oracle without foresight, at the targets' headroom.
const REACTIVE: &str = "reactive:115";

/// One seed's figures.
struct Row {
    seed: u64,
    ts: PolicyResult,
    hpa: PolicyResult,
    oracle: PolicyResult,
    reactive: PolicyResult,
    fixed_lead: Option<PolicyResult>,
    trace: String,
}

fn run_seed(seed: u64, start: &Start) -> Row {
    let fixed_lead = if start.against_fixed_lead {
        ",tokenscale-fixed-lead"
    } else {
        ""
    };
    let policies = format!("tokenscale,hpa,oracle,{REACTIVE}{fixed_lead}");
    let comparison = Comparison::family(seed, start.cold_start, &policies).expect("valid");
    let mut results = comparison.run().into_iter();
    let mut next = || results.next().expect("every policy asked for");
    Row {
        seed,
        ts: next(),
        hpa: next(),
        oracle: next(),
        reactive: next(),
        fixed_lead: start.against_fixed_lead.then(next),
        trace: comparison.trace.name.clone(),
    }
}

/// Every seed at `start`, on two threads (the seeds are independent and CI has two cores).
fn run_seeds(start: &Start) -> Vec<Row> {
    let seeds: Vec<u64> = SEEDS.collect();
    let (first, second) = seeds.split_at(seeds.len() / 2);
    std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            first
                .iter()
                .map(|&s| run_seed(s, start))
                .collect::<Vec<_>>()
        });
        let b = scope.spawn(|| {
            second
                .iter()
                .map(|&s| run_seed(s, start))
                .collect::<Vec<_>>()
        });
        let mut rows = a.join().expect("seeds ran");
        rows.extend(b.join().expect("seeds ran"));
        rows
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

fn table(start: &Start, rows: &[Row]) -> String {
    let mut table = format!(
        "--cold-start {}\n{:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>9} {:>7} {:>9} {:>7}  trace\n",
        start.cold_start,
        "seed",
        "ts SLO%",
        "hpa SLO%",
        "orc SLO%",
        "ts GPUh",
        "hpa GPUh",
        "orc GPUh",
        "ts/orc",
        "hpa/orc",
        "rx SLO%",
        "rx/orc",
        "fix SLO%",
        "fix/orc"
    );
    for r in rows {
        let orc = r.oracle.gpu_hours;
        let (fixed_slo, fixed_cost) = r.fixed_lead.as_ref().map_or((f64::NAN, f64::NAN), |f| {
            (f.slo_minute_attainment * 100.0, f.gpu_hours / orc)
        });
        table.push_str(&format!(
            "{:>4} {:>9.2} {:>9.2} {:>9.2} {:>9.1} {:>9.1} {:>9.1} {:>7.3} {:>7.3} {:>9.2} {:>7.3} {:>9.2} {:>7.3}  {}\n",
            r.seed,
            r.ts.slo_minute_attainment * 100.0,
            r.hpa.slo_minute_attainment * 100.0,
            r.oracle.slo_minute_attainment * 100.0,
            r.ts.gpu_hours,
            r.hpa.gpu_hours,
            orc,
            r.ts.gpu_hours / orc,
            r.hpa.gpu_hours / orc,
            r.reactive.slo_minute_attainment * 100.0,
            r.reactive.gpu_hours / orc,
            fixed_slo,
            fixed_cost,
            // The seed's base rate and day; the rest is in `tokenscale sim --trace family:N`.
            r.trace.split(';').next().unwrap_or_default()
        ));
    }
    table
}

/// The figures of one policy at one start time over seeds: `(median, worst)`.
fn summary(rows: &[Row], policy: impl Fn(&Row) -> &PolicyResult) -> (Bound, Bound) {
    let attainment: Vec<f64> = rows
        .iter()
        .map(|r| policy(r).slo_minute_attainment)
        .collect();
    let cost: Vec<f64> = rows
        .iter()
        .map(|r| policy(r).gpu_hours / r.oracle.gpu_hours)
        .collect();
    let median = Bound {
        attainment: median(attainment.clone()),
        cost: median(cost.clone()),
    };
    let worst = Bound {
        attainment: attainment.iter().copied().fold(1.0, f64::min),
        cost: cost.iter().copied().fold(0.0, f64::max),
    };
    (median, worst)
}

fn within(figure: Bound, bound: Bound) -> bool {
    figure.attainment >= bound.attainment && figure.cost <= bound.cost
}

/// Prints the table and NOT MET for each target missed; returns what failed, in words.
fn check(start: &Start, rows: &[Row]) -> Vec<String> {
    let mut table = table(start, rows);
    let (median, worst) = summary(rows, |r| &r.ts);
    let line = |who: &str, median: Bound, worst: Bound| {
        format!(
            "{who} at {}: median {:.2}% of minutes at {:.3}× the oracle; worst {:.2}%, {:.3}×\n",
            start.cold_start,
            median.attainment * 100.0,
            median.cost,
            worst.attainment * 100.0,
            worst.cost
        )
    };
    table.push_str(&line("tokenscale", median, worst));
    let (reactive_median, reactive_worst) = summary(rows, |r| &r.reactive);
    table.push_str(&line(
        &format!("{REACTIVE} (no foresight, perfect perception)"),
        reactive_median,
        reactive_worst,
    ));
    let targets = [
        ("median", median, start.target_median),
        ("worst", worst, start.target_worst),
    ];
    for (which, figure, target) in targets {
        if let Some(target) = target.filter(|t| !within(figure, *t)) {
            table.push_str(&format!(
                "NOT MET at {}: the {which} seed ≥ {:.0}% of minutes at ≤ {:.2}× the oracle; \
                 asserting the reached floor instead\n",
                start.cold_start,
                target.attainment * 100.0,
                target.cost
            ));
        }
    }
    println!("{table}");

    let mut failed = Vec::new();
    for (which, figure, floor) in [
        ("median", median, start.floor_median),
        ("worst", worst, start.floor_worst),
    ] {
        if !within(figure, floor) {
            failed.push(format!(
                "{}: the {which} seed fell below the reached floor {floor:?}",
                start.cold_start
            ));
        }
    }
    let beat_hpa: Vec<u64> = (rows.iter())
        .filter(|r| {
            r.ts.slo_minute_attainment >= r.hpa.slo_minute_attainment
                && r.ts.gpu_hours < r.hpa.gpu_hours
        })
        .map(|r| r.seed)
        .collect();
    let beat_fixed: Vec<u64> = (rows.iter())
        .filter(|r| r.fixed_lead.as_ref().is_some_and(|f| beats_fixed(&r.ts, f)))
        .map(|r| r.seed)
        .collect();
    let fixed_run = start.against_fixed_lead;
    for (what, beaten, floor, asked) in [
        ("hpa on both figures", &beat_hpa, start.beats_hpa, true),
        (
            "the fixed 60 s lead",
            &beat_fixed,
            start.beats_fixed_lead,
            fixed_run,
        ),
    ] {
        if !asked {
            continue;
        }
        let missed: Vec<u64> = (rows.iter().map(|r| r.seed))
            .filter(|seed| !beaten.contains(seed))
            .collect();
        if !missed.is_empty() {
            println!(
                "NOT MET at {}: every seed beats {what}; seeds {missed:?} do not",
                start.cold_start
            );
        }
        if beaten.len() < floor {
            failed.push(format!(
                "{}: {} seeds beat {what}, the reached floor is {floor}",
                start.cold_start,
                beaten.len()
            ));
        }
    }
    // Whatever the cost, no seed may meet the SLO in fewer minutes than under hpa.
    for r in rows
        .iter()
        .filter(|r| r.ts.slo_minute_attainment < r.hpa.slo_minute_attainment)
    {
        failed.push(format!(
            "{} seed {}: hpa meets the SLO in more minutes",
            start.cold_start, r.seed
        ));
    }
    failed
}

/// Better than the policy with a fixed lead: more minutes within the SLO, or as many for fewer
/// GPU-hours.
fn beats_fixed(ts: &PolicyResult, fixed: &PolicyResult) -> bool {
    ts.slo_minute_attainment > fixed.slo_minute_attainment
        || (ts.slo_minute_attainment == fixed.slo_minute_attainment
            && ts.gpu_hours < fixed.gpu_hours)
}

#[test]
fn the_policy_holds_the_slo_across_the_trace_family_at_three_start_times() {
    let failed: Vec<String> = STARTS
        .iter()
        .flat_map(|start| check(start, &run_seeds(start)))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
