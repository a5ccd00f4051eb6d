//! What a scrape round reads: the model asked about and the `/metrics` endpoints that serve
//! it, listed by whatever knows them (EndpointSlices in a cluster, fixed URLs, a local pool).

use std::future::Future;

use super::readings::TargetKind;

/// The model a metrics source is asked about.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRef {
    /// Namespace of the ModelDeployment.
    pub namespace: String,
    /// Name of its engine Service.
    pub service: String,
    /// The served model name (the gateway's `model_name` label).
    pub served_name: String,
    /// Stable window, seconds.
    pub stable_s: f64,
    /// Panic window, seconds.
    pub panic_s: f64,
}

/// One `/metrics` endpoint to scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrapeTarget {
    /// Its name in readings and per-replica loads (a pod's name, or the URL).
    pub name: String,
    /// Its `/metrics` URL.
    pub url: String,
    /// Gateway or engine: which series it exports.
    pub kind: TargetKind,
}

/// Lists the endpoints to scrape for a model now. A listing that fails is logged and left
/// out by the implementation: a scrape round reads what it can, and the policy holds on
/// what is missing.
pub trait ScrapeTargets: Send + Sync {
    /// The gateway replicas and the model's engine replicas now.
    fn scrape_targets(&self, model: &ModelRef) -> impl Future<Output = Vec<ScrapeTarget>> + Send;
}
