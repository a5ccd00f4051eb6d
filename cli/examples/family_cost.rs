//! Where the policy's GPU-hours beyond the oracle's go on one member of the trace family:
//! replicas held against the oracle's every 30 s sample, summed by the trace's phase there
//! (rising, falling or flat rate). `cargo run --example family_cost SEED [COLD_START]`;
//! with `--series`, every sample too (t min, phase, req/s, tokenscale, oracle).

use tokenscale::sim::{Comparison, Trace};

/// The rate's relative change over two minutes around a sample beyond which it is a rise or
/// a fall rather than flat load.
const SLOPE: f64 = 0.1;

fn phase(trace: &Trace, t_s: f64) -> &'static str {
    let now = trace.rate_rps(t_s).max(1e-9);
    let slope = (trace.rate_rps(t_s + 60.0) - trace.rate_rps(t_s - 60.0)) / now;
    if slope > SLOPE {
        "rise"
    } else if slope < -SLOPE {
        "fall"
    } else {
        "flat"
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let series = args.iter().any(|a| a == "--series");
    let mut positional = args.iter().filter(|a| !a.starts_with("--"));
    let seed = positional.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let cold_start = positional.next().cloned().unwrap_or_else(|| "15s".into());
    let comparison = Comparison::family(seed, &cold_start, "tokenscale,oracle").expect("valid");
    let results = comparison.run();
    let (ts, oracle) = (&results[0], &results[1]);
    let knee = comparison.knee.tokens_per_s;
    println!(
        "{}\nknee {knee:.1} tokens/s per replica; tokenscale {:.2}% at {:.3}x the oracle",
        comparison.trace.name,
        ts.slo_minute_attainment * 100.0,
        ts.gpu_hours / oracle.gpu_hours
    );
    let mut by_phase: Vec<(&str, f64, f64, usize)> = Vec::new();
    for (a, b) in ts.series.iter().zip(&oracle.series) {
        let p = phase(&comparison.trace, a.t_s);
        let (held, need) = (f64::from(a.replicas), f64::from(b.replicas));
        if series {
            println!(
                "S {:.1} {p} {:.1} {} {}",
                a.t_s / 60.0,
                a.demand_rps,
                a.replicas,
                b.replicas
            );
        }
        match by_phase.iter_mut().find(|(q, ..)| *q == p) {
            Some(row) => {
                row.1 += held - need;
                row.2 += need;
                row.3 += 1;
            }
            None => by_phase.push((p, held - need, need, 1)),
        }
    }
    let oracle_total: f64 = by_phase.iter().map(|r| r.2).sum();
    for (p, extra, need, samples) in by_phase {
        println!(
            "phase {p}: {samples} samples, extra {:.1} replica-samples ({:.1}% of the oracle's \
             total), {:.3}x the oracle there",
            extra,
            100.0 * extra / oracle_total.max(1e-9),
            (need + extra) / need.max(1e-9)
        );
    }
}
