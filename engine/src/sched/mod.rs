//! The iteration-level scheduler (pure): which requests run each step, how many tokens each,
//! and who is preempted when the KV pool runs dry.

mod request;
mod scheduler;

pub use request::{Priority, SchedRequest};
pub use scheduler::{ScheduledSeq, Scheduler, SchedulerConfig, SchedulerOutput};
