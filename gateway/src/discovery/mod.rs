//! Where replicas come from: the config's static upstreams, the programmatic [`Registry`]
//! (used by `tokenscale up`), and Kubernetes (`ModelDeployment` + `EndpointSlice` watches).

mod adapters;
mod cold_start;
mod engine;
pub mod kubernetes;
mod registry;
pub mod routes;
mod section;
mod slo;

pub use registry::{Registry, RegistryError};
pub use section::validate_section;

use std::sync::atomic::{AtomicU8, Ordering};

/// Whether a discovery source the gateway depends on is running, for `/health`.
#[derive(Debug, Default)]
pub struct DiscoveryHealth {
    state: AtomicU8,
}

const NOT_USED: u8 = 0;
const STARTING: u8 = 1;
const SYNCED: u8 = 2;
const FAILING: u8 = 3;

impl DiscoveryHealth {
    /// A discovery task is about to start: unhealthy until its first full listing.
    pub fn set_starting(&self) {
        self.state.store(STARTING, Ordering::Relaxed);
    }

    /// The cluster's objects were listed and applied.
    pub fn set_synced(&self) {
        self.state.store(SYNCED, Ordering::Relaxed);
    }

    /// Discovery stopped and is being retried.
    pub fn set_failing(&self) {
        self.state.store(FAILING, Ordering::Relaxed);
    }

    /// `None` when healthy (or no discovery is used), else why not.
    pub fn problem(&self) -> Option<&'static str> {
        match self.state.load(Ordering::Relaxed) {
            NOT_USED | SYNCED => None,
            STARTING => Some("kubernetes discovery has not listed the cluster yet"),
            _ => Some("kubernetes discovery is failing (see the logs); retrying"),
        }
    }
}
