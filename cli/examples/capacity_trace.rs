//! The capacity one replica is planned with over a run, beside the true knee: one line a
//! minute (`cargo run -p tokenscale --example capacity_trace COLD_START SEED`).

use tokenscale::sim::Comparison;
use tokenscale_scaling::scaling::journal;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cold_start = args.first().map_or("15s", |s| s.as_str());
    let seed = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let comparison = Comparison::family(seed, cold_start, "tokenscale").expect("valid");
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
