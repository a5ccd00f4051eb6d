//! The true capacity of one replica within the SLO for a trace's request mix: the highest
//! steady arrival rate at which p95 TTFT and p95 TPOT both meet their targets, found by
//! bisection on a one-replica run of the same fluid model. The oracle plans with it, `hpa`
//! takes its in-flight target from it, and it seeds the tokenscale policy's hint (what
//! `tokenscale bench --slo-*` would report as the operating point).

use tokenscale_common::perf_model::PerfProfile;
use tokenscale_scaling::autoscaler::Slo;

use super::metrics::Recorder;
use super::replica::{Cohort, ReplicaState, TickContext};
use super::trace::RequestClass;

const WARMUP_S: f64 = 120.0;
const MEASURE_S: u64 = 300;
const BISECTIONS: usize = 24;

/// One replica's operating point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knee {
    /// Requests/s one replica takes within the SLO.
    pub requests_per_s: f64,
    /// Output tokens/s at that rate.
    pub tokens_per_s: f64,
    /// Mean requests in flight (running plus waiting) at that rate.
    pub in_flight: f64,
}

/// Finds the knee for `classes` on `profile` under `slo`, with ticks of `dt_s`.
pub fn find(profile: &PerfProfile, classes: &[RequestClass], slo: Slo, dt_s: f64) -> Knee {
    let mean_out: f64 = classes.iter().map(|c| c.weight * c.output_tokens).sum();
    let mean_ctx: f64 = classes
        .iter()
        .map(|c| c.weight * (c.input_tokens + c.output_tokens / 2.0))
        .sum();
    // No replica beats full batches with no prefill: an upper bound for the search.
    let decode_bound = profile.decode_tokens_per_s(profile.max_num_seqs, mean_ctx.round() as u32);
    let (mut lo, mut hi) = (0.0, 2.0 * decode_bound / mean_out);
    let mut best = Knee {
        requests_per_s: 0.0,
        tokens_per_s: 0.0,
        in_flight: 0.0,
    };
    for _ in 0..BISECTIONS {
        let rate = 0.5 * (lo + hi);
        match run(profile, classes, slo, dt_s, rate) {
            Some(in_flight) => {
                lo = rate;
                best = Knee {
                    requests_per_s: rate,
                    tokens_per_s: rate * mean_out,
                    in_flight,
                };
            }
            None => hi = rate,
        }
    }
    best
}

/// Runs one replica at a steady `rate`; the mean in-flight count when the SLO holds.
fn run(
    profile: &PerfProfile,
    classes: &[RequestClass],
    slo: Slo,
    dt_s: f64,
    rate: f64,
) -> Option<f64> {
    let ctx = TickContext {
        profile,
        classes,
        slo,
    };
    let mut replica = ReplicaState::default();
    let mut rec = Recorder::new(slo.ttft_p95_s, slo.tpot_p95_s);
    let end_s = WARMUP_S + MEASURE_S as f64;
    let (mut t_s, mut in_flight_sum, mut samples) = (0.0, 0.0, 0.0f64);
    while t_s < end_s {
        rec.set_time(t_s);
        for (class, c) in classes.iter().enumerate() {
            replica.enqueue(Cohort::arriving(
                class as u8,
                rate * c.weight * dt_s,
                t_s + 0.5 * dt_s,
            ));
        }
        replica.tick(&ctx, t_s, dt_s, 1.0, &mut rec);
        if t_s >= WARMUP_S {
            in_flight_sum += replica.in_flight();
            samples += 1.0;
        }
        t_s += dt_s;
    }
    let view = rec.window(MEASURE_S, 0);
    let backlog_s = replica.waiting_count() / rate.max(1e-9);
    let met = view.ttft_p95_s.is_some_and(|v| v <= slo.ttft_p95_s)
        && view.tpot_p95_s.is_some_and(|v| v <= slo.tpot_p95_s);
    (met && backlog_s <= slo.ttft_p95_s).then(|| in_flight_sum / samples.max(1.0))
}

/// What one prompt token costs a replica of `profile` at `knee`, in output tokens: its prefill
/// term, plus the KV reads it adds to each decode step of its answer, over what one output
/// token's decode takes there (a replica at the knee is busy: each second of its steps serves
/// `knee.requests_per_s` requests' prompts and answers). `None` when the knee leaves no time
/// for decoding (a degenerate profile).
pub fn prompt_token_cost(
    profile: &PerfProfile,
    classes: &[RequestClass],
    knee: &Knee,
) -> Option<f64> {
    let mean_out: f64 = classes.iter().map(|c| c.weight * c.output_tokens).sum();
    let mean_in: f64 = classes.iter().map(|c| c.weight * c.input_tokens).sum();
    let per_prompt_token_s =
        profile.step.prefill_s_per_token + profile.step.kv_read_s_per_token * mean_out;
    let decode_s = (1.0 / knee.requests_per_s - per_prompt_token_s * mean_in) / mean_out;
    (knee.requests_per_s > 0.0 && decode_s > 0.0 && decode_s.is_finite())
        .then(|| per_prompt_token_s / decode_s)
}
