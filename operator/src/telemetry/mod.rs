//! The operator's own telemetry: Prometheus metrics, the `/metrics` and `/health` endpoint,
//! and JSON logs.

pub mod metrics;
pub mod model_gauges;
pub mod server;

pub use metrics::Metrics;
pub use model_gauges::{ModelFigures, ModelGauges};

/// Installs JSON logs on stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
