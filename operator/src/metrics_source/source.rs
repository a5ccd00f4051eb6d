//! The metrics source the reconciler asks each period: scraping (EndpointSlices or URLs) or
//! a Prometheus server. A source never fails a reconcile: what it cannot read is missing,
//! and the policy holds on missing metrics.

use futures::future::{BoxFuture, join_all};
use kube::Client;

use super::discovery::EndpointCache;
use super::model::{MetricsView, ScrapeRound};
use super::prometheus;
use super::readings::{TargetKind, read};
use super::shared_scrape::SharedScrapes;
use super::{ModelRef, ScrapeTarget, ScrapeTargets};
use crate::children::ENGINE_PORT;

/// What a source returns: raw readings to fold into the model's memory, or a finished view.
// One per model per decision, moved once: boxing the view would save nothing worth a heap
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Observed {
    /// One scrape round.
    Round(ScrapeRound),
    /// A view computed elsewhere (Prometheus).
    View(MetricsView),
}

/// A source of per-model metrics.
pub trait MetricsSource: Send + Sync {
    /// This period's metrics of `model`.
    fn observe<'a>(&'a self, model: &'a ModelRef) -> BoxFuture<'a, Observed>;
    /// Whether `observe` scrapes (answers [`Observed::Round`]s the scaling loop windows
    /// itself, so sampling between decisions fills the windows; see `clock::sampler`).
    fn scrapes(&self) -> bool {
        false
    }
}

/// Where the gateway's metrics are.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayTargets {
    /// No gateway: engines only.
    None,
    /// Fixed `/metrics` URLs (one per gateway replica).
    Urls(Vec<String>),
    /// A Service whose ready endpoints are the gateway replicas.
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The metrics port.
        port: i32,
    },
}

/// Scrapes the gateway and the model's engine pods directly.
pub struct ScrapeSource {
    /// Client for EndpointSlice discovery.
    pub client: Client,
    /// Where the gateway is.
    pub gateway: GatewayTargets,
    /// The endpoint listings, reused for a few seconds (see `discovery::ENDPOINTS_TTL`).
    pub endpoints: EndpointCache,
    /// Fetches shared between the models of one round and the queue watch.
    pub scrapes: SharedScrapes,
}

impl ScrapeSource {
    /// `(name, /metrics URL)` of each gateway replica now.
    async fn gateways(&self) -> Vec<(String, String)> {
        match &self.gateway {
            GatewayTargets::None => Vec::new(),
            GatewayTargets::Urls(urls) => urls.iter().map(|u| (u.clone(), u.clone())).collect(),
            GatewayTargets::Service {
                namespace,
                name,
                port,
            } => match self
                .endpoints
                .endpoints(self.client.clone(), namespace, name, *port)
                .await
            {
                Ok(eps) => eps.into_iter().map(|e| (e.name, e.url)).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "listing gateway endpoints failed");
                    Vec::new()
                }
            },
        }
    }

    /// The `/metrics` URLs of the gateway replicas now.
    pub(super) async fn gateway_urls(&self) -> Vec<String> {
        self.gateways()
            .await
            .into_iter()
            .map(|(_, url)| url)
            .collect()
    }
}

impl ScrapeTargets for ScrapeSource {
    async fn scrape_targets(&self, model: &ModelRef) -> Vec<ScrapeTarget> {
        let mut targets: Vec<_> = self
            .gateways()
            .await
            .into_iter()
            .map(|(name, url)| ScrapeTarget {
                name,
                url,
                kind: TargetKind::Gateway,
            })
            .collect();
        match self
            .endpoints
            .endpoints(
                self.client.clone(),
                &model.namespace,
                &model.service,
                ENGINE_PORT,
            )
            .await
        {
            Ok(eps) => targets.extend(eps.into_iter().map(|e| ScrapeTarget {
                name: e.name,
                url: e.url,
                kind: TargetKind::Engine,
            })),
            Err(e) => {
                tracing::warn!(error = %e, service = %model.service, "listing engine endpoints failed")
            }
        }
        targets
    }
}

impl MetricsSource for ScrapeSource {
    fn scrapes(&self) -> bool {
        true
    }
    fn observe<'a>(&'a self, model: &'a ModelRef) -> BoxFuture<'a, Observed> {
        Box::pin(async move {
            let targets = self.scrape_targets(model).await;
            let fetches = targets.iter().map(|t| self.scrapes.get(&t.url));
            let mut round = ScrapeRound::default();
            for (ScrapeTarget { name, kind, .. }, scraped) in
                targets.iter().zip(join_all(fetches).await)
            {
                match scraped {
                    Ok(exposition) => {
                        if !exposition.errors.is_empty() {
                            tracing::debug!(target_name = %name, errors = exposition.errors.len(), "skipped malformed metric lines");
                        }
                        round.readings.push((
                            name.clone(),
                            *kind,
                            read(*kind, &exposition.samples, &model.served_name),
                        ));
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "scrape failed");
                        round.failed += 1;
                    }
                }
            }
            Observed::Round(round)
        })
    }
}

/// Reads everything from a Prometheus server.
pub struct PrometheusSource {
    /// Base URL of the server.
    pub base_url: String,
}

impl MetricsSource for PrometheusSource {
    fn observe<'a>(&'a self, model: &'a ModelRef) -> BoxFuture<'a, Observed> {
        Box::pin(async move {
            let q = prometheus::queries(
                &model.served_name,
                model.stable_s.ceil() as u64,
                model.panic_s.ceil() as u64,
            );
            match prometheus::view(&self.base_url, &q).await {
                Ok(view) => Observed::View(view),
                Err(e) => {
                    tracing::warn!(error = %e, "Prometheus query failed");
                    Observed::View(MetricsView::default())
                }
            }
        })
    }
}

/// A fixed answer (tests, and `tokenscale up` wiring its own numbers).
pub struct FixedSource(pub MetricsView);

impl MetricsSource for FixedSource {
    fn observe<'a>(&'a self, _model: &'a ModelRef) -> BoxFuture<'a, Observed> {
        Box::pin(async move { Observed::View(self.0.clone()) })
    }
}
