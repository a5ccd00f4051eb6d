//! The upstream side: a pooled HTTP/1.1 and h2c client, the retry layer, the upstream call
//! and the SSE relay that reads usage out of streams.

mod client;
mod h1_pool;
mod json_members;
mod retry;
mod sse;
mod upstream;
mod usage;

pub use client::{SendError, UpstreamClient};
pub use h1_pool::H1Error;
pub use retry::{Retry, RetryLayer};
pub use sse::SseRelay;
pub use upstream::{Upstream, UpstreamSettings};
pub use usage::{parse_usage, parse_usage_json};
