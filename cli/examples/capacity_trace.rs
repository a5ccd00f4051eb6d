//! The capacity one replica is planned with over a run, beside the true knee: one line a
//! minute (`cargo run -p tokenscale --example capacity_trace COLD_START SEED`).

use clap::Parser;
use tokenscale::sim::{Comparison, SimArgs};
use tokenscale_scaling::scaling::journal;

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    sim: SimArgs,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cold_start = args.first().map_or("15s", |s| s.as_str());
    let trace = format!("family:{}", args.get(1).map_or("1", |s| s.as_str()));
    let argv = [
        "sim",
        "--trace",
        &trace,
        "--cold-start",
        cold_start,
        "--policy",
        "tokenscale",
    ];
    let comparison = Comparison::from_args(&Wrapper::parse_from(argv).sim).expect("valid");
    journal::start();
    let result = comparison.run().remove(0);
    let log = journal::take();
    println!("true knee {:.0} tokens/s", comparison.knee.tokens_per_s);
    let mut next_s = 0.0;
    for e in &log {
        if e.now_s >= next_s {
            let missed = result.missed_minutes.contains(&((e.now_s / 60.0) as u32));
            println!(
                "{:6.1} min  capacity {:>7.0}  demand {:>7.0}  ready {:>3}  target {:>3}  {:?}{}",
                e.now_s / 60.0,
                e.capacity_tokens_per_s.unwrap_or(f64::NAN),
                e.demand_tokens_per_s.unwrap_or(f64::NAN),
                e.ready,
                e.target,
                e.reason,
                if missed { "  MISSED" } else { "" }
            );
            next_s = e.now_s + 60.0;
        }
    }
}
