//! The admission queue: requests wait here while every replica of their model is at its
//! concurrency target, or while the model has no ready replica (scale from zero).

mod layer;
mod queue;

pub use layer::{Admission, AdmissionLayer};
pub use queue::{QueueKey, WaitQueue};
