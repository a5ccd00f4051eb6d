//! Foresight in the simulator: on load that recurs (`cli/traces/on-off.yaml`: tripled for 12
//! minutes every 30) the policy learns the cycle from its own history and meets the returns
//! it otherwise meets one start late, at no more GPU-hours; on traces without recurrence
//! (the bundled `bursty` and `ramp`) it changes nothing that matters. Each test prints the
//! figures with `--foresight on` and `off` (run with `--nocapture`).

use clap::Parser;
use tokenscale::sim::{Comparison, PolicyResult, SimArgs};

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    sim: SimArgs,
}

/// The tokenscale run on `trace` with foresight `on` or `off`.
fn tokenscale(trace: &str, foresight: &str) -> PolicyResult {
    let argv = [
        "tokenscale-sim",
        "--trace",
        trace,
        "--policy",
        "tokenscale",
        "--foresight",
        foresight,
    ];
    let comparison = Comparison::from_args(&Wrapper::parse_from(argv).sim).expect("valid");
    comparison.run().remove(0)
}

/// A run's minutes within the SLO and GPU-hours, in words.
fn figures(r: &PolicyResult) -> String {
    format!(
        "{:.2}% of minutes at {:.2} GPU-hours",
        r.slo_minute_attainment * 100.0,
        r.gpu_hours
    )
}

/// The share of minutes from `from_minute` on that met the SLO.
fn attainment_from(r: &PolicyResult, minutes: u32, from_minute: u32) -> f64 {
    let missed = r
        .missed_minutes
        .iter()
        .filter(|&&m| m >= from_minute)
        .count();
    1.0 - missed as f64 / f64::from(minutes - from_minute)
}

#[test]
fn foresight_meets_recurring_load_after_the_first_cycles_at_no_more_gpu_hours() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/on-off.yaml");
    let (on, off) = (tokenscale(trace, "on"), tokenscale(trace, "off"));
    // 12 hours; the cycle is 30 minutes, so two cycles are seen by the first hour's end.
    let (minutes, learned) = (720, 60);
    let (on_after, off_after) = (
        attainment_from(&on, minutes, learned),
        attainment_from(&off, minutes, learned),
    );
    println!(
        "on-off: foresight on {} ({:.2}% after the first hour), off {} ({:.2}%)",
        figures(&on),
        on_after * 100.0,
        figures(&off),
        off_after * 100.0
    );
    assert!(
        on_after >= off_after + 0.03,
        "foresight should meet the returns a reactive policy misses: {on_after} vs {off_after}"
    );
    assert!(
        on.gpu_hours <= off.gpu_hours * 1.02,
        "at about the same GPU-hours: {} vs {}",
        on.gpu_hours,
        off.gpu_hours
    );
}

#[test]
fn a_trace_without_recurrence_is_no_worse_with_foresight() {
    for trace in ["bursty", "ramp"] {
        let (on, off) = (tokenscale(trace, "on"), tokenscale(trace, "off"));
        println!(
            "{trace}: foresight on {}, off {}",
            figures(&on),
            figures(&off)
        );
        assert!(
            on.slo_minute_attainment >= off.slo_minute_attainment,
            "{trace}: fewer minutes within the SLO with foresight"
        );
        assert!(
            on.gpu_hours <= off.gpu_hours * 1.01,
            "{trace}: more GPU-hours with foresight: {} vs {}",
            on.gpu_hours,
            off.gpu_hours
        );
    }
}
