//! One scaling loop, three users: the Kubernetes-free loop the operator, `tokenscale up` and
//! `tokenscale sim` all tick, so the three see a model the same way.
//!
//! Each period a user scrapes its targets into a [`ScrapeRound`], reads its scale target's
//! [`ReplicaCounts`], and calls [`ScalingLoop::tick`]. The loop windows the metrics, builds
//! the policy's [`Observations`] in one place ([`observations`]), runs the pure policy,
//! records the period in the SLO history and returns a [`Tick`]: the replica count to set,
//! how many ready replicas to mark for removal first, and what status shows. [`apply`] is the
//! thin async shell that carries a tick out on any [`ScaleTarget`](crate::scale::ScaleTarget)
//! (Kubernetes' scale subresource, `up`'s process pool); the simulator applies ticks to its
//! simulated fleet itself.
//!
//! **Pending replicas** are replicas the scale target was asked for that do not serve yet:
//! `desired − ready` (see [`pending_replicas`]). This counts, once, everything already ordered:
//! pods starting or loading the model, pods not created yet (no node, an image pull, `up`'s
//! crash-loop backoff), all of which are capacity on the way that a new decision must not
//! order again. Pods that exist but are not ready beyond `desired` (a scale-in removes them
//! first) are not on the way and do not count.
//!
//! No I/O and no clock reads here: "now" comes in as [`Clocks`], so the loop is as
//! deterministic as the policy and is unit-tested like it.
//!
//! [`ScrapeRound`]: crate::metrics_source::ScrapeRound
//! [`ReplicaCounts`]: crate::scale::ReplicaCounts
//! [`Observations`]: crate::autoscaler::Observations
//! [`Clocks`]: crate::autoscaler::Clocks

mod apply;
pub mod attainment;
mod cold_start;
pub mod journal;
mod model_loop;
#[cfg(test)]
mod rise_tests;
#[cfg(test)]
mod tests;

pub use apply::apply;
pub use cold_start::ColdStarts;
pub use model_loop::{ScalingLoop, Tick, observations, pending_replicas, ready_to_mark};
