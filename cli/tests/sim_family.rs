//! The autoscaling policy on the trace family (`--trace family:SEED`): workloads drawn from a
//! distribution of shapes (steps, on/off load, ramps, flash crowds, diurnal curves) that the
//! policy was not tuned on, under the simulator's honest defaults (the CRD's 15 s period and
//! 0.8 target utilisation, no capacity hint, start times the policy is not told, drawn with a
//! heavy right tail around the profile's 60 s). The target over 20 seeds with the default H100
//! profile: the median seed meets the SLO in ≥ 97% of minutes at ≤ 1.25× the oracle's
//! GPU-hours, the worst seed ≥ 95% at ≤ 1.40×, and every seed beats `hpa` on both. That target
//! is not reached yet: the test prints NOT MET with the table over seeds (run with
//! `--nocapture`), asserts the floors the policy does reach, and that every seed beats `hpa` on
//! both figures. If this fails, fix the policy, never the seeds or the family.

use clap::Parser;
use tokenscale::sim::{Comparison, PolicyResult, SimArgs};

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    sim: SimArgs,
}

const SEEDS: std::ops::RangeInclusive<u64> = 1..=20;

// What the policy reaches today under the honest defaults (median 96.39% at 1.395×, worst
// 94.31%, costliest seed 1.647×), with a little room for arithmetic changes elsewhere in the
// sim; raise them as the policy gets better, never lower them to make a change pass.
const FLOOR_MEDIAN_ATTAINMENT: f64 = 0.958;
const CEILING_MEDIAN_COST: f64 = 1.41;
const FLOOR_WORST_ATTAINMENT: f64 = 0.935;
const CEILING_WORST_COST: f64 = 1.66;

/// One seed's figures.
struct Row {
    seed: u64,
    ts: PolicyResult,
    hpa: PolicyResult,
    oracle: PolicyResult,
    trace: String,
}

fn run_seed(seed: u64) -> Row {
    let trace = format!("family:{seed}");
    let argv = [
        "tokenscale-sim",
        "--trace",
        &trace,
        "--policy",
        "tokenscale,hpa,oracle",
    ];
    let comparison = Comparison::from_args(&Wrapper::parse_from(argv).sim).expect("valid");
    let mut results = comparison.run().into_iter();
    let mut next = || results.next().expect("three policies");
    Row {
        seed,
        ts: next(),
        hpa: next(),
        oracle: next(),
        trace: comparison.trace.name.clone(),
    }
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

#[test]
fn the_policy_holds_the_slo_across_the_trace_family() {
    // Two threads: the seeds are independent and CI has two cores.
    let seeds: Vec<u64> = SEEDS.collect();
    let (first, second) = seeds.split_at(seeds.len() / 2);
    let rows: Vec<Row> = std::thread::scope(|scope| {
        let a = scope.spawn(|| first.iter().map(|&s| run_seed(s)).collect::<Vec<_>>());
        let b = scope.spawn(|| second.iter().map(|&s| run_seed(s)).collect::<Vec<_>>());
        let mut rows = a.join().expect("seeds ran");
        rows.extend(b.join().expect("seeds ran"));
        rows
    });

    let mut table = format!(
        "{:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}  trace\n",
        "seed",
        "ts SLO%",
        "hpa SLO%",
        "orc SLO%",
        "ts GPUh",
        "hpa GPUh",
        "orc GPUh",
        "ts/orc",
        "hpa/orc"
    );
    for r in &rows {
        table.push_str(&format!(
            "{:>4} {:>9.2} {:>9.2} {:>9.2} {:>9.1} {:>9.1} {:>9.1} {:>7.3} {:>7.3}  {}\n",
            r.seed,
            r.ts.slo_minute_attainment * 100.0,
            r.hpa.slo_minute_attainment * 100.0,
            r.oracle.slo_minute_attainment * 100.0,
            r.ts.gpu_hours,
            r.hpa.gpu_hours,
            r.oracle.gpu_hours,
            r.ts.gpu_hours / r.oracle.gpu_hours,
            r.hpa.gpu_hours / r.oracle.gpu_hours,
            r.trace
        ));
    }
    let attainment: Vec<f64> = rows.iter().map(|r| r.ts.slo_minute_attainment).collect();
    let cost: Vec<f64> = rows
        .iter()
        .map(|r| r.ts.gpu_hours / r.oracle.gpu_hours)
        .collect();
    let (median_attainment, median_cost) = (median(attainment.clone()), median(cost.clone()));
    let worst_attainment = attainment.iter().copied().fold(1.0, f64::min);
    let worst_cost = cost.iter().copied().fold(0.0, f64::max);
    table.push_str(&format!(
        "tokenscale: median {:.2}% of minutes at {:.3}× the oracle; worst {:.2}%, {:.3}×\n",
        median_attainment * 100.0,
        median_cost,
        worst_attainment * 100.0,
        worst_cost
    ));
    println!("{table}");

    // The target for 60 s starts (median ≥ 97% at ≤ 1.25×, worst ≥ 95% at ≤ 1.40×) is not met
    // yet: say so in every run, and hold what the policy does reach so it cannot get worse.
    let target = median_attainment >= 0.97
        && median_cost <= 1.25
        && worst_attainment >= 0.95
        && worst_cost <= 1.40;
    if !target {
        println!(
            "NOT MET: the family target for 60 s starts (median ≥ 97% of minutes at ≤ 1.25× the \
             oracle, worst ≥ 95% at ≤ 1.40×); asserting the reached floors instead"
        );
    }
    assert!(
        median_attainment >= FLOOR_MEDIAN_ATTAINMENT && median_cost <= CEILING_MEDIAN_COST,
        "median seed fell below the reached floor\n{table}"
    );
    assert!(
        worst_attainment >= FLOOR_WORST_ATTAINMENT && worst_cost <= CEILING_WORST_COST,
        "worst seed fell below the reached floor\n{table}"
    );
    for r in &rows {
        assert!(
            r.ts.slo_minute_attainment >= r.hpa.slo_minute_attainment
                && r.ts.gpu_hours < r.hpa.gpu_hours,
            "seed {}: hpa is not beaten on both figures\n{table}",
            r.seed
        );
    }
}
