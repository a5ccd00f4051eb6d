//! tokenscale-gateway: the OpenAI front door — tenant keys and token limits, an admission
//! queue, load- and prefix-aware replica picking, and a streaming proxy that measures
//! latency as clients see it.
//!
//! The request path is one tower stack (see [`stack::build`]):
//! errors → request id & tracing → auth → parse → metrics → limits → admission queue →
//! retry → replica picker → upstream call.

pub mod admission;
pub mod auth;
pub mod batch;
pub mod body;
pub mod config;
pub mod discovery;
pub mod error;
pub mod health;
pub(crate) mod json_members;
pub mod limits;
pub mod load;
pub mod metrics;
pub mod proxy;
pub mod reload;
pub mod request;
pub mod routing;
pub mod server;
pub mod stack;
pub mod store;
pub mod usage;
pub mod vocab;

pub use body::Body;

pub use discovery::Registry;
pub use error::GatewayError;
pub use server::{Gateway, RunningGateway, Workers, serve};
