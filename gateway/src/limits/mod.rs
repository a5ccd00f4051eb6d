//! Tenants' limits: requests, input tokens and output tokens per minute, per model and across
//! models, in memory (one pod) or in Redis (shared by every pod).

mod bucket;
mod early;
mod layer;
mod limiter;
mod memory;
pub mod plan;
mod redis;
mod section;

pub use bucket::TokenBucket;
pub use early::{EarlyLimits, EarlyLimitsLayer};
pub use layer::{Limits, LimitsLayer};
pub use limiter::{LimitError, Limiter, Reservation, Settle, StoreHealth};
pub use memory::MemoryStore;
pub use plan::{Refusal, Scope};
pub use section::validate_section;
