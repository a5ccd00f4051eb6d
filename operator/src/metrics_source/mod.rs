//! Where demand and latency come from: scrape the gateway's and the engines' Prometheus
//! `/metrics` (found through EndpointSlices, or given as URLs), or ask a Prometheus server.
//! Parsing and windowing live in `tokenscale-scaling` (re-exported here), shared with the CLI.

pub mod discovery;
pub mod prometheus;
pub mod scrape;
pub mod shared_scrape;
pub mod source;
pub mod waiting;

pub use tokenscale_scaling::metrics_source::{
    ModelRef, ScrapeTarget, ScrapeTargets, histogram, model, readings, text_format, window,
};

pub use model::{MetricsView, ModelMetrics, ScrapeRound};
pub use readings::TargetKind;
pub use source::{
    FixedSource, GatewayTargets, MetricsSource, Observed, PrometheusSource, ScrapeSource,
};
