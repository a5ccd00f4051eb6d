//! Per-tenant, per-model limits: requests, input tokens and output tokens per minute.

mod bucket;
mod headers;
mod layer;
mod limiter;

pub use bucket::TokenBucket;
pub use headers::RateLimitHeaders;
pub use layer::{Limits, LimitsLayer};
pub use limiter::{LimitKind, Limiter, Refusal, Reservation, Settle};
