//! Admission's rules: who may take a slot of a model's capacity now and in what order the
//! others wait (the slot counts, the room rules, the fair queue), while every replica of the
//! model is at this pod's share of its concurrency target or none is ready (scale from zero);
//! and the pod's and the tenants' in-flight caps. A model's pool (`routing/`) keeps its slots
//! under the lock of its replicas and hands out the permits: routing imports admission, never
//! the other way.

mod in_flight;
mod queue;
mod section;
mod slots;

pub use in_flight::{
    InFlight, InFlightCounts, InFlightGuard, InFlightLayer, InFlightRefusal,
    refused as in_flight_refused,
};
pub use queue::{QueueKey, WaitQueue};
pub use section::validate_section;
pub use slots::Slots;
