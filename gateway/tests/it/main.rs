//! Gateway integration tests: real sockets on loopback against mock replicas.

mod auth;
mod bad_input;
mod config_file;
mod failover;
mod limits;
mod observability;
mod queue;
mod routing;
mod streaming;
mod support;
