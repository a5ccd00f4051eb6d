//! Gateway integration tests: real sockets on loopback against mock replicas.

mod adapters;
mod adaptive_cap;
mod arrivals;
mod attacks;
mod auth;
mod bad_input;
mod bounded;
mod client_bounds;
mod config_file;
mod engine_answers;
mod engines;
mod failover;
mod layering;
mod limits;
mod observability;
mod priority;
mod processes;
mod queue;
mod routes;
mod routing;
mod shared_limits;
mod shutdown_delay;
mod streaming;
mod support;
mod usage;
mod vllm_failover;
