//! Where demand and latency come from: scrape the gateway's and the engines' Prometheus
//! `/metrics` (found through EndpointSlices, or given as URLs), parse them, and reduce them
//! to windowed rates and p95s from histogram bucket deltas; or ask a Prometheus server.

pub mod discovery;
pub mod histogram;
pub mod model;
pub mod prometheus;
pub mod readings;
pub mod scrape;
pub mod shared_scrape;
pub mod source;
pub mod waiting;
pub mod window;

/// The one Prometheus text parser (shared with the gateway and the CLI).
pub use tokenscale_common::prom_text as text_format;

pub use model::{MetricsView, ModelMetrics, ScrapeRound};
pub use readings::TargetKind;
pub use source::{
    FixedSource, GatewayTargets, MetricsSource, ModelRef, Observed, PrometheusSource, ScrapeSource,
};
