//! `tokenscale sim` with Batch API jobs on the bundled `diurnal` trace, under the operator's
//! policy: a job whose window is ample finishes in time on the capacity interactive traffic
//! leaves, without a replica added (the replica series is the one without the job); a job
//! larger than the capacity left idle in its window gets replicas, finishes in time, and the
//! interactive SLO holds as well as without it. Run with `--nocapture` for the tables.

use clap::Parser;
use tokenscale::sim::{BatchEffect, Comparison, SimArgs, run_command};

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    sim: SimArgs,
}

fn args(batch: &str) -> SimArgs {
    let argv = [
        "tokenscale-sim",
        "--trace",
        "diurnal",
        "--policy",
        "tokenscale",
        "--batch",
        batch,
    ];
    Wrapper::parse_from(argv).sim
}

/// The run with the job against the same run without it, after printing the report.
fn effect(batch: &str) -> BatchEffect {
    let args = args(batch);
    println!("--batch {batch}\n{}", run_command(&args).expect("valid"));
    let comparison = Comparison::from_args(&args).expect("valid");
    let results = comparison.run();
    comparison
        .batch_effects(&results)
        .pop()
        .expect("one policy with a job")
}

/// Output tokens the ready replicas could serve within the SLO beyond the interactive ones,
/// between `from_s` and `to_s`, in the run without the job.
fn idle_tokens(effect: &BatchEffect, from_s: f64, to_s: f64) -> f64 {
    const SAMPLE_S: f64 = 30.0; // each point covers the interval before it
    let series = &effect.without.series;
    series
        .iter()
        .filter(|p| p.t_s > from_s && p.t_s <= to_s)
        .map(|p| p.idle_tokens_per_s * SAMPLE_S)
        .sum()
}

fn replicas(series: &[tokenscale::sim::SeriesPoint]) -> Vec<(u32, u32)> {
    series.iter().map(|p| (p.replicas, p.ready)).collect()
}

#[test]
fn an_ample_window_finishes_in_time_without_a_replica_added() {
    let e = effect("at=1h,tokens=30M,window=4h");
    let job = e.with.batches[0];
    let idle = idle_tokens(&e, job.job.at_s, job.job.deadline_s());
    println!("idle in the window without the job: {idle:.3e} output tokens");
    assert!(
        idle >= 2.0 * job.job.output_tokens,
        "not ample: {idle:.3e} tokens idle in the window"
    );
    let finished = job.finished_at_s.expect("finished");
    assert!(finished <= job.job.deadline_s(), "finished at {finished} s");
    assert_eq!(job.deadline_met(), Some(true));
    assert_eq!(
        replicas(&e.with.series),
        replicas(&e.without.series),
        "a replica was added or removed for the batch"
    );
    assert_eq!(e.with.gpu_hours, e.without.gpu_hours);
    assert_eq!(e.extra_gpu_hours, vec![0.0]);
    assert_eq!(
        e.with.slo_minute_attainment,
        e.without.slo_minute_attainment
    );
    assert_eq!(e.with.request_attainment, e.without.request_attainment);
}

#[test]
fn a_tight_window_scales_out_finishes_in_time_and_keeps_the_slo() {
    let e = effect("at=1h,tokens=100M,window=2h");
    let job = e.with.batches[0];
    let idle = idle_tokens(&e, job.job.at_s, job.job.deadline_s());
    println!("idle in the window without the job: {idle:.3e} output tokens");
    assert!(
        idle < job.job.output_tokens,
        "not tight: {idle:.3e} tokens idle in the window cover it"
    );
    assert!(
        e.extra_gpu_hours[0] > 0.0,
        "no scale-out: {:?}",
        e.extra_gpu_hours
    );
    assert!(
        e.with.peak_replicas >= e.without.peak_replicas,
        "{} < {}",
        e.with.peak_replicas,
        e.without.peak_replicas
    );
    let finished = job.finished_at_s.expect("finished");
    assert!(finished <= job.job.deadline_s(), "finished at {finished} s");
    assert_eq!(job.deadline_met(), Some(true));
    assert!(
        e.with.slo_minute_attainment >= e.without.slo_minute_attainment,
        "SLO minutes {:.4} with the batch, {:.4} without (missed {:?})",
        e.with.slo_minute_attainment,
        e.without.slo_minute_attainment,
        e.with.missed_minutes
    );
    assert!(
        e.with.request_attainment >= e.without.request_attainment,
        "SLO requests {:.4} with the batch, {:.4} without",
        e.with.request_attainment,
        e.without.request_attainment
    );
}

/// A job that cannot be served by its deadline even at the largest fleet is reported missed,
/// with what was left; the interactive traffic is still served.
#[test]
fn a_job_too_big_for_the_fleet_is_reported_missed() {
    let mut args = args("at=1h,tokens=2G,window=1h");
    args.max_replicas = 30;
    let comparison = Comparison::from_args(&args).expect("valid");
    let result = comparison.run().pop().expect("one policy");
    let job = result.batches[0];
    assert_eq!(job.deadline_met(), Some(false));
    assert_eq!(job.finished_at_s, None);
    assert!(job.left_tokens > 0.0 && job.left_tokens < job.job.output_tokens);
    assert!(result.peak_replicas <= 30);
}

/// Batch jobs in a JSONL recording: `{"batch": {...}}` lines among the requests, checked like
/// the flag's; a bad one is a clear error naming its line.
#[test]
fn jsonl_traces_carry_batch_jobs() {
    let dir = tokenscale_scratch::scratch!("sim-batch");
    let path = dir.join("trace.jsonl");
    let mut text =
        String::from("{\"batch\": {\"at_s\": 10, \"output_tokens\": 5000, \"window_s\": 600}}\n");
    for i in 0..600 {
        text.push_str(&format!(
            "{{\"t\": {}, \"input_tokens\": 200, \"output_tokens\": 100}}\n",
            f64::from(i) * 0.5
        ));
    }
    std::fs::write(&path, &text).expect("write trace");
    let trace = path.to_str().expect("utf-8 path");
    let argv = ["tokenscale-sim", "--trace", trace, "--policy", "static:1"];
    let comparison = Comparison::from_args(&Wrapper::parse_from(argv).sim).expect("valid");
    assert_eq!(comparison.trace.batches.len(), 1);
    let result = comparison.run().pop().expect("one policy");
    let job = result.batches[0];
    assert_eq!(
        (job.job.at_s, job.job.output_tokens, job.job.window_s),
        (10.0, 5000.0, 600.0)
    );
    assert_eq!(job.deadline_met(), Some(true), "{job:?}");

    std::fs::write(
        &path,
        "{\"batch\": {\"at_s\": 10, \"output_tokens\": 0, \"window_s\": 600}}\n",
    )
    .expect("write trace");
    let argv = ["tokenscale-sim", "--trace", trace];
    let err = Comparison::from_args(&Wrapper::parse_from(argv).sim)
        .expect_err("a batch of no tokens")
        .to_string();
    assert!(
        err.contains("line 1") && err.contains("output_tokens"),
        "{err}"
    );
}
