//! The upstream side: a pooled HTTP/1.1 and h2c client, the upstream call, the replica's
//! stream (idle timeout, ejection), and the failover layer that retries unstarted requests and
//! continues broken streams on other replicas.

mod client;
pub mod failover;
mod h1_pool;
mod priority_field;
mod section;
mod sse;
mod stream;
mod upstream;
mod usage;

pub use client::{SendError, UpstreamClient};
pub use failover::{Failover, FailoverLayer, FailoverSettings};
pub use h1_pool::H1Error;
pub use section::validate_section;
pub use stream::{StreamBroke, UpstreamStream};
pub use upstream::{Upstream, UpstreamSettings};
pub use usage::{estimate_completion_tokens, parse_usage, parse_usage_json};
