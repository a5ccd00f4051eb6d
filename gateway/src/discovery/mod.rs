//! Where replicas come from: the config's static upstreams, the programmatic [`Registry`]
//! (used by `tokenscale up`), and Kubernetes (`ModelDeployment` + `EndpointSlice` watches).

pub mod kubernetes;
mod registry;

pub use registry::{Registry, RegistryError};
