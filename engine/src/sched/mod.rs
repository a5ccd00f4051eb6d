//! The iteration-level scheduler (pure): which requests run each step, how many tokens each,
//! and who is preempted when the KV pool runs dry.

mod batch_rate;
mod request;
mod scheduler;
mod step_time;

pub use request::{Priority, SchedRequest};
pub use scheduler::{ScheduledSeq, Scheduler, SchedulerConfig, SchedulerOutput};
pub use step_time::{StepLimits, StepTimeModel};
