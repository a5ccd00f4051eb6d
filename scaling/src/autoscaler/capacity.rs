//! Online learning of one replica's capacity within the SLO (the knee of its latency curve):
//! when the SLO holds at a per-replica throughput x, capacity ≥ x; when it breaks under real
//! load (and not while a backlog drains), capacity ≈ x. With lots of latency headroom the estimate creeps up, so a hint that was
//! too low does not over-provision forever. Replicas that report a concurrency cap and run at
//! it show their knee directly (`knee`): capacity is read there, without an SLO break.

use super::knee::{knee_tokens_per_s, learn_at_knee};
use super::observations::{Demand, Observations};
use super::rise::significant_rise;
use super::spec::PolicySpec;
use super::state::PolicyState;

/// Fewer completions than this in the stable window make the p95s too noisy to learn from.
const MIN_COMPLETED_REQUESTS: u64 = 20;
/// When the SLO breaks, move this share of the way from the estimate down to the observation.
const LEARN_DOWN_GAIN: f64 = 0.5;
/// Probe upward only while both p95s, scaled to the planned load, stay below this share of
/// their targets.
const PROBE_HEADROOM: f64 = 0.5;
/// Probing stops at this share of the throughput where the SLO last broke.
const PROBE_CEILING_SHARE: f64 = 0.95;
/// Probe only while the replicas run at least this share of the planned load: headroom seen
/// near idle says nothing about the knee.
const PROBE_MIN_LOAD: f64 = 0.5;
/// Upward probe per period (relative).
const PROBE_STEP: f64 = 0.005;

/// How far the latencies are from the SLO: the larger of p95/target for TTFT and TPOT;
/// `None` when neither p95 is known.
pub fn slo_ratio(spec: &PolicySpec, obs: &Observations) -> Option<f64> {
    let ttft = obs.ttft_p95_s.map(|v| v / spec.slo.ttft_p95_s);
    let tpot = obs.tpot_p95_s.map(|v| v / spec.slo.tpot_p95_s);
    match (ttft, tpot) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// What one period's observations teach about capacity; [`remember`](super::decide) keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Learned {
    /// Requests queued now (a shrinking queue next period is spare capacity, not a knee).
    pub queued_requests: u64,
    /// This period's short-window throughput per ready replica.
    pub burst_per_replica: f64,
    /// Per-replica throughput where the SLO last broke under real load.
    pub ceiling_tokens_per_s: Option<f64>,
    /// Output tokens/s one replica sustains within the SLO.
    pub capacity_tokens_per_s_per_replica: Option<f64>,
}

/// The capacity learned from this period's observations, `state` as it was before them and
/// the ready count steady since `ready_since_s`: read at the replicas' concurrency cap when
/// they run at it (see `knee`), else learned from the SLO.
pub(crate) fn learn(
    spec: &PolicySpec,
    obs: &Observations,
    demand: &Demand,
    state: &PolicyState,
    ready_since_s: f64,
    now_s: f64,
) -> Learned {
    let from_slo = learn_from_slo(spec, obs, demand, state, ready_since_s, now_s);
    // The short window's throughput per replica means something only with the same replicas
    // over all of it.
    let steady = now_s - ready_since_s >= spec.panic_window.as_secs_f64();
    let tpot_ratio = obs.tpot_p95_s.map(|v| v / spec.slo.tpot_p95_s);
    let cap = obs.concurrency_cap.as_ref();
    match knee_tokens_per_s(cap, demand, obs.ready_replicas, tpot_ratio).filter(|_| steady) {
        Some(x) => Learned {
            capacity_tokens_per_s_per_replica: Some(learn_at_knee(
                state.capacity_tokens_per_s_per_replica,
                x,
            )),
            ..from_slo
        },
        None => from_slo,
    }
}

/// What the SLO (held or broken) teaches about capacity this period.
fn learn_from_slo(
    spec: &PolicySpec,
    obs: &Observations,
    demand: &Demand,
    state: &PolicyState,
    ready_since_s: f64,
    now_s: f64,
) -> Learned {
    let draining = state
        .last_queued_requests
        .is_some_and(|before| demand.queued_requests < before);
    let ready = obs.ready_replicas;
    let window_s = spec.stable_window.as_secs_f64();
    let burst_per_replica = demand.output_tokens_per_s.panic / f64::from(ready.max(1));
    let unchanged = Learned {
        queued_requests: demand.queued_requests,
        burst_per_replica,
        ceiling_tokens_per_s: state.capacity_ceiling_tokens_per_s,
        capacity_tokens_per_s_per_replica: state.capacity_tokens_per_s_per_replica,
    };
    let peak = state.burst_load(now_s, window_s, burst_per_replica);
    let Some(ratio) = slo_ratio(spec, obs) else {
        return unchanged;
    };
    // The p95s cover the window before the count last changed: only a count held over all of
    // it is the count they measured. Except for a break after a scale-in: the window then
    // mixes more replicas with fewer, so the break is the fewer's (the scale-up that follows
    // would reset the window before the break is ever learned, and the fleet would scale in
    // again). Headroom in such a window is the more's: nothing to learn up from.
    let broke_scaled_in =
        ratio > 1.0 && (state.last_scale_in).is_some_and(|(_, before)| ready < before);
    let settled = now_s - ready_since_s >= window_s;
    if ready == 0
        || !(settled || broke_scaled_in)
        || demand.completed_requests < MIN_COMPLETED_REQUESTS
    {
        return unchanged;
    }
    // Per-replica throughput over the same window the p95s cover.
    let x = demand.output_tokens_per_s.stable / f64::from(ready);
    if !(x.is_finite() && x > 0.0) {
        return unchanged;
    }
    let saturated = demand.queued_requests > u64::from(ready);
    let current = state.capacity_tokens_per_s_per_replica;
    // A break counts as the knee only while these replicas are loaded now: requests waiting at
    // them, or throughput near the plan. Otherwise the tail comes from somewhere else (a
    // backlog from before the last scale-up still in the window, long prompts, a slow replica).
    // A draining queue is spare capacity: never a knee. Nor is a rise still arriving (the
    // burst window's arrivals beyond noise, `rise`): the queue at its onset breaks the p95
    // while completions, and so the measured throughput, still lag the load (each burst of
    // the trace family taught a knee 5-10% lower, never probed back).
    let rising = significant_rise(spec, demand);
    let real_load =
        |c: f64| !draining && !rising && (saturated || x >= 0.9 * c * spec.target_utilization);
    // The p95 reports the worst part of its window: a break happened at the highest load the
    // window held (a 30 s spike breaks a minute's p95 while the minute's mean stays low), so
    // that is the throughput the knee is at or below, not the mean.
    let x_break = x.max(peak);
    let mut learned_ceiling = state.capacity_ceiling_tokens_per_s;
    if ratio > 1.0 && current.is_none_or(real_load) {
        learned_ceiling = Some(learned_ceiling.map_or(x_break, |ceiling| ceiling.min(x_break)));
    } else if ratio <= 1.0 && learned_ceiling.is_some_and(|ceiling| x > ceiling) {
        // The SLO held above the old ceiling: the knee moved (a lighter mix, a faster engine).
        learned_ceiling = Some(x);
    }
    let ceiling = learned_ceiling.unwrap_or(f64::INFINITY);
    // Batch lines share the replicas, filling what interactive traffic leaves: the latency
    // then depends on how much batch work the gateway sends, not on the interactive load `x`,
    // and replicas added for batch work spread `x` thin. Headroom seen meanwhile says nothing
    // about the knee: no probing up (crept up under a batch, the estimate sized the fleet
    // below its need once the batch was done).
    let batch_running = demand.batch.pending() || demand.batch.output_tokens_per_s.stable > 0.0;
    let next = match current {
        None if ratio > 1.0 => x_break,
        None => x / spec.target_utilization,
        Some(c) if ratio > 1.0 => {
            if real_load(c) && x_break < c {
                c - LEARN_DOWN_GAIN * (c - x_break)
            } else {
                c
            }
        }
        Some(c) if x > c => x,
        // Latency headroom seen below the planned load (rounding to whole replicas, a light
        // hour) is scaled up to it, linearly: headroom at 75% of the knee must not pass for
        // headroom at the plan.
        Some(c)
            if !batch_running
                && x >= PROBE_MIN_LOAD * c * spec.target_utilization
                && ratio * (c * spec.target_utilization / x).max(1.0) < PROBE_HEADROOM =>
        {
            (c * (1.0 + PROBE_STEP))
                .min(PROBE_CEILING_SHARE * ceiling)
                .max(c)
        }
        Some(c) => c,
    };
    Learned {
        ceiling_tokens_per_s: learned_ceiling,
        capacity_tokens_per_s_per_replica: Some(next),
        ..unchanged
    }
}
