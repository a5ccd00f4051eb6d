//! Acting on a rise within a second: a burst window that shows more arrivals than the stable
//! window's rate explains, beyond Poisson noise, and whose offered demand needs more replicas
//! than are ready and on the way, counts at once, whatever the size of the step (Knative's
//! panic mode waits for a burst that needs 2× the ready replicas).
//!
//! The guard against noise has three parts, each needed alone:
//! - **significance**: the burst window's arrivals exceed what the stable rate predicts for it
//!   by [`RISE_SIGMAS`] standard deviations of a Poisson count (√expected) and by
//!   [`RISE_MIN_SHARE`] of it. At 20 requests/s a 6 s window holds 120 expected arrivals
//!   (σ ≈ 11): noise passes three σ on about one sample in 700, and a 1.5× step passes within
//!   about 4 s of showing in the window;
//! - **need**: that burst demand, at the target utilisation, needs at least one replica more
//!   than ready plus pending, so a blip the fleet's rounding absorbs orders nothing, and a rise
//!   that replicas already ordered will serve orders nothing twice;
//! - **persistence**: a scaler acts only when two consecutive scrapes show it
//!   ([`RISE_SCRAPES`], counted by `ScalingLoop::rise_seen`).
//!
//! Scale-in is untouched: a rise only ever adds replicas, and what it adds enters the
//! scale-down window's recommendations like any other level.

use super::observations::Demand;
use super::spec::PolicySpec;

/// Standard deviations (Poisson, √expected) the burst window's arrivals must exceed the stable
/// rate's prediction by.
const RISE_SIGMAS: f64 = 3.0;
/// ...and by at least this share of it (at high rates three σ is a fraction of a percent:
/// the half-window lag of a slow diurnal climb is no rise to act on between periods).
const RISE_MIN_SHARE: f64 = 0.1;
/// Consecutive scrapes that must show the rise before a scaler decides between periods.
pub const RISE_SCRAPES: u32 = 2;

/// Whether the burst window's arrivals rose above the stable window's rate beyond noise.
pub fn significant_rise(spec: &PolicySpec, demand: &Demand) -> bool {
    let window_s = spec.panic_window.as_secs_f64();
    let expected = demand.arrival_requests_per_s.stable * window_s;
    let seen = demand.arrival_requests_per_s.panic * window_s;
    expected > 0.0
        && seen > expected * (1.0 + RISE_MIN_SHARE)
        && seen - expected > RISE_SIGMAS * expected.sqrt()
}

/// Standard deviations (Poisson) of the stable window's arrivals within which a demand just
/// past the replicas' planned load is no reason to add one (see [`within_arrival_noise`]).
const LEVEL_NOISE_SIGMAS: f64 = 2.0;

/// Whether `planned_tokens_per_s` exceeds `fits_tokens_per_s` (what the current replicas
/// carry at the target utilisation) by no more than the stable window's arrival noise: a
/// mean over `n` Poisson arrivals wanders by `1/√n` of itself, so a demand that sits at the
/// boundary crosses it every few periods while nothing changed (HPA's 10% tolerance, sized
/// to the window's own noise: 5.8% at 20 requests/s, 1.4% at 335).
pub(crate) fn within_arrival_noise(
    spec: &PolicySpec,
    demand: &Demand,
    planned_tokens_per_s: f64,
    fits_tokens_per_s: f64,
) -> bool {
    let arrivals = demand.arrival_requests_per_s.stable * spec.stable_window.as_secs_f64();
    arrivals > 0.0
        && fits_tokens_per_s > 0.0
        && planned_tokens_per_s <= fits_tokens_per_s * (1.0 + LEVEL_NOISE_SIGMAS / arrivals.sqrt())
}

/// Whether `demand` shows a rise that needs more than `existing` (ready plus pending) replicas
/// of `capacity` output tokens/s each, at `tokens_per_request` output tokens a request.
pub fn rise_outgrows(
    spec: &PolicySpec,
    demand: &Demand,
    tokens_per_request: f64,
    capacity: f64,
    existing: u32,
) -> bool {
    let per_replica = capacity * spec.target_utilization;
    if !(per_replica > 0.0 && tokens_per_request > 0.0) {
        return false;
    }
    let burst_tokens_per_s = demand.arrival_requests_per_s.panic * tokens_per_request;
    significant_rise(spec, demand) && burst_tokens_per_s / per_replica > f64::from(existing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscaler::{Slo, WindowedRate};

    fn spec() -> PolicySpec {
        PolicySpec::new(
            1,
            100,
            Slo {
                ttft_p95_s: 1.0,
                tpot_p95_s: 0.05,
            },
        )
    }

    fn demand(stable_rps: f64, burst_rps: f64) -> Demand {
        Demand {
            arrival_requests_per_s: WindowedRate {
                stable: stable_rps,
                panic: burst_rps,
            },
            ..Demand::default()
        }
    }

    #[test]
    fn a_step_smaller_than_two_times_counts_once_it_needs_a_replica_more() {
        // 20 req/s × 100 tokens on replicas of 1,000 tokens/s at 0.8: 2.5 → 3 replicas.
        let step = demand(20.0, 30.0);
        assert!(rise_outgrows(&spec(), &step, 100.0, 1000.0, 3));
        // Three replicas starting already serve it: nothing twice.
        assert!(!rise_outgrows(&spec(), &step, 100.0, 1000.0, 4));
    }

    #[test]
    fn noise_and_slow_climbs_are_no_rise() {
        // 20 req/s over 6 s: 120 expected, σ ≈ 11; 130 is within noise.
        assert!(!significant_rise(&spec(), &demand(20.0, 130.0 / 6.0)));
        // At 400 req/s a 5% lead is 8 σ, but below the share a rise needs.
        assert!(!significant_rise(&spec(), &demand(400.0, 420.0)));
        assert!(significant_rise(&spec(), &demand(400.0, 460.0)));
        // A rise that the fleet's rounding absorbs orders nothing.
        assert!(!rise_outgrows(
            &spec(),
            &demand(20.0, 30.0),
            100.0,
            1000.0,
            5
        ));
        // No demand before, unknown capacity or tokens: no rise.
        assert!(!significant_rise(&spec(), &demand(0.0, 5.0)));
        assert!(!rise_outgrows(&spec(), &demand(20.0, 40.0), 100.0, 0.0, 1));
    }
}
