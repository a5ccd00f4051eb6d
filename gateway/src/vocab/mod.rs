//! The gateway's ground floor: the words every layer speaks, defined once, importing no layer.
//!
//! What a request is ([`RequestInfo`], its [`Priority`]), what its answer used ([`Usage`],
//! the body's [`Report`]), how long a cold model holds it ([`ColdStart`]), this pod's
//! [`GatewayShare`] of what the pods split, which limit counts ([`LimitKind`]) and how limits
//! are told to clients ([`RateLimitHeaders`]), and what a route declares ([`RouteSpec`], checked
//! by [`check_routes`] wherever routes come from). Every other module may import these; this
//! module imports none of them (see the layering in the crate's README).

mod cold_start;
mod limit_kind;
mod rate_limit_headers;
mod refused_key;
mod replica_addr;
mod report;
mod request_info;
mod route_spec;
mod share;

pub use cold_start::ColdStart;
pub use limit_kind::LimitKind;
pub use rate_limit_headers::{BucketHeader, RateLimitHeaders};
pub use refused_key::KeyRefused;
pub use replica_addr::ReplicaAddr;
pub use report::{Report, Usage};
pub use request_info::{Info, RequestInfo};
pub use route_spec::{KnownModels, RouteError, RouteSpec, RouteTarget, check_routes};
pub use share::{GatewayShare, pod_share};
pub use tokenscale_common::priority::Priority;

/// The error type of response bodies and of the streams they are made of.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
