//! Where tokenscale misses the SLO after rises, over the trace family: every missed minute
//! classified by its phase after the last abrupt rise of the trace's rate (before the first
//! scale-up decision, decided but not ready, ready while the backlog drains, or no rise near)
//! and by the reasons of the decisions taken in it.
//! `cargo run -p tokenscale --example rise_misses [COLD_STARTS] [SEEDS] [-v]`, e.g.
//! `15s,60s 1-20 -v` (the defaults without `-v`); `-v` prints each missed minute with its
//! decisions as `Reason{asked before}→{asked after}r{ready}q{queued}d{planned demand in
//! replicas of the learned capacity}` (the loop's `journal`). "ready, draining" is the two
//! minutes after the first scale-up's count is ready, "ready, later" past that.

use std::collections::BTreeMap;

use tokenscale::sim::Comparison;
use tokenscale_scaling::scaling::journal::{self, Entry};

/// A rise: the rate a minute later is this many times what it was.
const RISE_FACTOR: f64 = 1.2;
/// A missed minute belongs to a rise that began at most this long (plus 3 lead times) before.
const RISE_REACH_S: f64 = 180.0;

const PHASES: [&str; 5] = [
    "before decision",
    "decided, not ready",
    "ready, draining",
    "ready, later",
    "no rise",
];

/// Seconds at which the rate starts rising by `RISE_FACTOR` over a minute.
fn rise_onsets(comparison: &Comparison) -> Vec<f64> {
    let rate = |t: f64| comparison.trace.rate_rps(t);
    let rising = |t: f64| t >= 60.0 && rate(t) > RISE_FACTOR * rate(t - 60.0) && rate(t) > 0.5;
    let end = comparison.trace.duration_s as u64;
    (60..end)
        .map(|s| s as f64)
        .filter(|&t| rising(t) && !rising(t - 1.0))
        .collect()
}

/// One missed minute's phase and the decisions in it.
fn classify(minute: u32, onsets: &[f64], log: &[Entry], lead_s: f64) -> (usize, String) {
    let (start, mid) = (f64::from(minute) * 60.0, f64::from(minute) * 60.0 + 30.0);
    let reasons: Vec<String> = (log.iter())
        .filter(|e| e.now_s >= start - 15.0 && e.now_s < start + 60.0)
        .map(|e| {
            let need = e
                .demand_tokens_per_s
                .zip(e.capacity_tokens_per_s)
                .map_or(0.0, |(d, c)| d / c);
            format!(
                "{}{}→{}r{}q{}d{need:.1}",
                e.reason, e.desired_before, e.target, e.ready, e.queued_requests
            )
        })
        .collect();
    let reach = RISE_REACH_S + 3.0 * lead_s;
    let Some(&onset) = onsets
        .iter()
        .rev()
        .find(|&&t| t < start + 60.0 && t >= start - reach)
    else {
        return (4, reasons.join(" "));
    };
    let first_up = log
        .iter()
        .find(|e| e.now_s >= onset - 1.0 && e.target > e.desired_before);
    let phase = match first_up {
        None => 0,
        Some(d) if mid < d.now_s => 0,
        Some(d) => {
            let ready_at = (log.iter())
                .find(|e| e.now_s > d.now_s && e.ready >= d.target)
                .map_or(f64::INFINITY, |e| e.now_s);
            if mid < ready_at {
                1
            } else if mid < ready_at + 120.0 {
                2
            } else {
                3
            }
        }
    };
    let decided = first_up.map_or("none".into(), |d| {
        format!("{:.0}s→{}", d.now_s - onset, d.target)
    });
    (
        phase,
        format!(
            "rise {:.0}s ago, first up {decided}; {}",
            mid - onset,
            reasons.join(" ")
        ),
    )
}

/// One seed's figures: missed minutes by phase, attainment and GPU-hours over the oracle's.
type Seed = ([usize; 5], f64, f64);

fn run(cold_start: &str, seed: u64, verbose: bool) -> Seed {
    let comparison = Comparison::family(seed, cold_start, "tokenscale,oracle").expect("valid");
    journal::start();
    let mut results = comparison.run();
    let log = journal::take();
    let oracle = results.remove(1);
    let result = results.remove(0);
    let onsets = rise_onsets(&comparison);
    let lead_s = result.lead_time_s.unwrap_or(60.0);
    let mut counts = [0; 5];
    for &m in &result.missed_minutes {
        let (phase, detail) = classify(m, &onsets, &log, lead_s);
        counts[phase] += 1;
        if verbose {
            let rate = |t: f64| comparison.trace.rate_rps(t);
            let t = f64::from(m) * 60.0;
            println!(
                "{cold_start} seed {seed} min {m} [{}] {:.1}→{:.1} req/s: {detail}",
                PHASES[phase],
                rate(t - 60.0),
                rate(t + 30.0)
            );
        }
    }
    (
        counts,
        result.slo_minute_attainment,
        result.gpu_hours / oracle.gpu_hours,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verbose = args.iter().any(|a| a == "-v");
    let plain: Vec<&String> = args.iter().filter(|a| *a != "-v").collect();
    let starts = plain.first().map_or("15s,60s", |s| s.as_str());
    let (from, to) = plain
        .get(1)
        .and_then(|s| s.split_once('-'))
        .map_or((1, 20), |(a, b)| {
            (a.parse().unwrap_or(1), b.parse().unwrap_or(20))
        });
    for cold_start in starts.split(',') {
        let seeds: Vec<u64> = (from..=to).collect();
        let (a, b) = seeds.split_at(seeds.len() / 2);
        let per_seed: BTreeMap<u64, Seed> = std::thread::scope(|scope| {
            let run_all = |part: &[u64]| -> Vec<(u64, Seed)> {
                part.iter()
                    .map(|&s| (s, run(cold_start, s, verbose)))
                    .collect()
            };
            let first = scope.spawn(move || run_all(a));
            let mut all = run_all(b);
            all.extend(first.join().expect("seeds ran"));
            all.into_iter().collect()
        });
        println!("--cold-start {cold_start}: missed minutes by phase after a rise");
        println!(
            "seed {}   SLO%  ×orc",
            PHASES.map(|p| format!("{p:>19}")).join("")
        );
        let mut total = [0; 5];
        for (seed, (counts, slo, cost)) in &per_seed {
            let phases = counts.map(|c| format!("{c:>19}")).join("");
            println!("{seed:>4} {phases} {:6.2} {cost:.3}", slo * 100.0);
            (0..5).for_each(|i| total[i] += counts[i]);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            0.5 * (v[(v.len() - 1) / 2] + v[v.len() / 2])
        };
        let slos: Vec<f64> = per_seed.values().map(|r| r.1).collect();
        let costs: Vec<f64> = per_seed.values().map(|r| r.2).collect();
        println!(" all {}", total.map(|c| format!("{c:>19}")).join(""));
        println!(
            "median {:.2}% at {:.3}×, worst {:.2}%, costliest {:.3}×\n",
            median(slos.clone()) * 100.0,
            median(costs.clone()),
            slos.iter().copied().fold(1.0, f64::min) * 100.0,
            costs.iter().copied().fold(0.0, f64::max)
        );
    }
}
