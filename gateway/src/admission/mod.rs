//! Admission: requests wait here while every replica of their model is at this pod's share of
//! its concurrency target, or while the model has no ready replica (scale from zero), in a
//! fair queue; the pod's and the tenants' in-flight caps; and the pods' shares.

mod in_flight;
mod layer;
mod permit;
mod queue;
mod slots;

pub use in_flight::{
    InFlight, InFlightCounts, InFlightGuard, InFlightLayer, InFlightRefusal,
    refused as in_flight_refused,
};
pub use layer::{Admission, AdmissionLayer, QueueWait};
pub use permit::{AdmissionPermit, Entry, Queued, Waiter, arrive, dispatch};
pub use queue::{QueueKey, WaitQueue};
pub use slots::Slots;
