//! tokenscale-operator: reconciles `ModelDeployment` resources into engine Deployments,
//! Services and PodDisruptionBudgets, and scales them on output tokens/s per GPU against a
//! p95 latency SLO.

pub mod clock;
pub mod controller;
pub mod error;
pub mod leader;
pub mod metrics_source;
pub mod render;
pub mod scale;
pub mod telemetry;

pub use error::{Error, Result};
/// The custom resources and the objects they own (pure builders), at the paths the operator
/// has always used.
pub use tokenscale_crd::{self as crd, children};
/// The Kubernetes-free core, at the paths the operator has always used.
pub use tokenscale_scaling::{autoscaler, budget, scaling};
