//! The autoscaling policy: a pure function from a model's spec, this period's observations
//! and the policy's memory to a desired replica count and the reason, in words.
//!
//! `decide` is a pipeline read top to bottom (as Knative's KPA): `estimate` (replica
//! tracking, the capacity learned this period, demand from the stable and burst windows, the
//! trend and the backlog) → `target` (a typed result: hold for missing metrics or unknown
//! capacity, from zero, to zero, or replicas with what they are made of) → `stabilise` (rate
//! caps, the scale-down window, one step down, the bounds) → `remember`, the only stage that
//! writes the memory. The reason comes from one match on the stabilised step; the message is
//! a pure function of the stages' outputs (`explain`).
//!
//! The rules, in order:
//! - **Capacity** `C` (output tokens/s one replica sustains within the SLO) starts from the
//!   spec's hint and is learned at the knee: the SLO holding at per-replica throughput x means
//!   C ≥ x; breaking under real load means C ≈ the highest short-window throughput of the
//!   window the p95 covers (a spike breaks a p95 while the mean stays low), but not while a
//!   rise is still arriving (its queue breaks the p95 before completions show the load, and
//!   each burst taught a knee 5-10% lower that was never probed back); latency headroom
//!   at the planned load (not at a light one: latency is flat far below the knee) lets C creep
//!   up.
//! - **Demand** `D` = arrivals × mean output tokens over the stable window when the gateway
//!   counts arrivals (served throughput runs above arrivals while a backlog drains: it is not
//!   demand); max(served tokens/s, that) when only engine completions are known. Plus queued
//!   requests spread over that window and a startup time, less what the spare of the needed
//!   (or already present) replicas drains anyway (only when nothing is starting: starting
//!   replicas will absorb the queue, counting it twice would cascade); the stabilisation
//!   window remembers the demand without that backlog, a transient need. A rising demand is
//!   extrapolated over the startup time, one period and half a window, so the new replicas
//!   are ready when the demand gets there; the rise must show in both halves of the window
//!   (a step is already all in the demand), at most doubles it, and stops counting once the
//!   short window shows the demand has levelled off (the lagging mean would overshoot).
//! - **Desired** = ceil(D / (C × targetUtilization)); the panic window (Knative: a burst that
//!   needs ≥ 2× the ready replicas, and with gateway arrivals one beyond Poisson noise: on one
//!   replica noise alone needs 2×) turns on panic mode for a stable window, in which the burst
//!   demand counts and nothing scales down. A stable demand past the current replicas by no
//!   more than the stable window's arrival noise (2σ), with the SLO met and nothing queued,
//!   holds (`rise::within_arrival_noise`): a fleet at its boundary otherwise added a replica
//!   every few minutes and kept it for a scale-in window.
//! - **Up** fast: at once, to the needed count in one decision from gateway arrivals; capped
//!   at max(2× current, current + 4) per period from engine completions (capped by capacity). Starting
//!   replicas are part of `current`, so a replica that never becomes ready is not replaced
//!   again and again; past 3× the startup time the message says so.
//! - **Down** slowly: only to the highest recommendation of the scale-in window (the spec's,
//!   lengthened for load that comes back: `oscillation`), at most a quarter of the replicas per period, never while panicking,
//!   never while a p95 is above 0.8 × its SLO (Dynamo's headroom check; the re-prediction at
//!   N/(N−1) is built in since the target is computed from demand at the smaller count). A
//!   steady fall is not extrapolated, but the window mean's half-window lag is corrected, so
//!   the fleet follows a falling demand where it is, not where it was.
//! - **Batch** (the gateway's Batch API, `batch`): batch lines are in no interactive figure
//!   (the metrics sources take them off the engines' counts). Their required throughput (the
//!   backlog over the time to its deadline, as it has held for a startup) is compared with
//!   the capacity the interactive replicas leave idle at the knee; only the shortfall adds
//!   replicas, as a level the stabilisation window remembers, so they stay while the batches
//!   need them. Capacity is not probed up while batch lines share the replicas.
//! - **Zero**: to zero only after `scale_to_zero_after` without demand or batch work (if min
//!   is 0), never by a plain scale-down step; from zero at once when requests wait or arrive,
//!   or a batch has work left.
//! - **Missing metrics**: hold; never scale down blind.
//! - Always within `[min_replicas, max_replicas]`; a clamped choice says `Bounded`.

mod batch;
#[cfg(test)]
mod batch_tests;
mod capacity;
mod decide;
mod decision;
#[cfg(test)]
mod edge_tests;
mod estimate;
mod explain;
pub mod foresight;
pub mod knee;
mod observations;
mod oscillation;
#[cfg(test)]
mod pipeline_tests;
#[cfg(test)]
mod props;
mod rise;
pub mod snapshot;
mod spec;
mod stabilise;
mod state;
mod target;
#[cfg(test)]
mod tests;
pub mod work;
mod zero;

pub use capacity::slo_ratio;
pub use decide::decide;
pub use decision::{Decision, DecisionReason};
pub use knee::{CapSource, ConcurrencyCap};
pub use observations::{
    BatchDemand, Demand, DemandSource, Observations, ReplicaLoad, WindowedRate,
};
pub use rise::{RISE_SCRAPES, rise_outgrows, significant_rise};
pub use snapshot::{Clocks, PolicySnapshot, restore, snapshot};
pub use spec::{DEFAULT_PROMPT_TOKEN_COST, PolicySpec, Slo, SpecError};
pub use state::PolicyState;
pub use zero::wants_a_first_replica;
