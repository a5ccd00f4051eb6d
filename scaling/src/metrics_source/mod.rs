//! Metrics as the policy sees them: scrape readings reduced to windowed rates and p95s from
//! histogram bucket deltas. Where the readings come from (EndpointSlices, fixed URLs, a
//! Prometheus server) is the user's, behind [`ScrapeTargets`].

mod caps;
pub mod histogram;
pub mod model;
pub mod readings;
pub mod start;
mod targets;
pub mod window;

/// The one Prometheus text parser (shared with the gateway and the CLI).
pub use tokenscale_common::prom_text as text_format;

pub use model::{MetricsView, ModelMetrics, ScrapeRound};
pub use readings::TargetKind;
pub use start::EngineStart;
pub use targets::{ModelRef, ScrapeTarget, ScrapeTargets};
