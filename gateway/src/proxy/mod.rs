//! The upstream side: a pooled HTTP/1.1 and h2c client, the upstream call, the replica's
//! stream (idle timeout, ejection), and the failover layer that retries unstarted requests and
//! continues broken streams on other replicas.

mod client;
pub mod failover;
mod h1_pool;
pub(crate) mod json_members;
mod priority_field;
mod sse;
mod stream;
mod upstream;
mod usage;

pub use client::{SendError, UpstreamClient};
pub use failover::{Failover, FailoverLayer, FailoverSettings};
pub use h1_pool::H1Error;
pub use stream::{StreamBroke, UpstreamStream};
pub use upstream::{Upstream, UpstreamSettings};
pub use usage::{estimate_completion_tokens, parse_usage, parse_usage_json};

/// The replica that answered a streamed response, set by the upstream call as a typed
/// response extension: failover reads it to continue a broken stream on another replica. (The
/// `x-tokenscale-upstream` header says the same to the client, but a URL that is not a valid
/// header value would be missing there; this never is.) A whole answer carries none: it is
/// never continued, and a failed attempt names its replica in its error. A handle on the
/// replica, not a copy of its URL.
#[derive(Debug, Clone)]
pub struct AnsweredBy(pub std::sync::Arc<crate::routing::Replica>);
