//! Scale targets: the trait and its helpers are `tokenscale-scaling`'s (re-exported here);
//! the operator's implementation is the engine Deployment's `scale` subresource.

pub mod kubernetes;

pub use kubernetes::KubernetesScaleTarget;
pub use tokenscale_scaling::scale::*;
