//! Where a policy misses the SLO on one member of the trace family: each missed minute with
//! the rate then and the replicas held and ready. `cargo run --example family_misses SEED`.

use clap::Parser;
use tokenscale::sim::{Comparison, SimArgs};

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    sim: SimArgs,
}

fn main() {
    let seed = std::env::args().nth(1).unwrap_or_else(|| "1".into());
    let trace = format!("family:{seed}");
    let argv = ["sim", "--trace", &trace, "--policy", "tokenscale,oracle"];
    let comparison = Comparison::from_args(&Wrapper::parse_from(argv).sim).expect("valid");
    println!("{}", comparison.trace.name);
    for r in comparison.run() {
        println!(
            "{}: {:.2}% of minutes, {:.1} GPU-hours",
            r.policy,
            r.slo_minute_attainment * 100.0,
            r.gpu_hours
        );
        let peak = r.series.iter().map(|p| p.replicas).max().unwrap_or(0);
        if let Some(at) = r.series.iter().position(|p| p.replicas == peak) {
            println!(
                "  peak {peak} replicas at {:.0} min; around it (t min, req/s, held, ready):",
                r.series[at].t_s / 60.0
            );
            for p in &r.series[at.saturating_sub(6)..(at + 6).min(r.series.len())] {
                println!(
                    "    {:.1} {:.0} {} {}",
                    p.t_s / 60.0,
                    p.demand_rps,
                    p.replicas,
                    p.ready
                );
            }
        }
        for m in &r.missed_minutes {
            let t = f64::from(*m) * 60.0;
            let at = |t: f64| {
                r.series
                    .iter()
                    .rev()
                    .find(|p| p.t_s <= t)
                    .map_or((0, 0), |p| (p.replicas, p.ready))
            };
            let (held, ready) = at(t + 30.0);
            println!(
                "  minute {m}: {:.0} req/s at its start, {:.0} a minute before; {held} held, {ready} ready",
                comparison.trace.rate_rps(t),
                comparison.trace.rate_rps(t - 60.0)
            );
        }
    }
}
