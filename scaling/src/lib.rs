//! tokenscale-scaling: the Kubernetes-free scaling core the operator, `tokenscale up` and
//! `tokenscale sim` share: the policy, the per-model loop, metric windows and readings, the
//! scale-target and scrape-target traits, and the cluster GPU budget.

pub mod autoscaler;
pub mod budget;
pub mod metrics_source;
pub mod scale;
pub mod scaling;
