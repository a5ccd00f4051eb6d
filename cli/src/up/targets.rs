//! What `tokenscale up` scrapes, listed through the scaling crate's [`ScrapeTargets`] as the
//! operator lists EndpointSlices: the in-process gateway and the pool's ready engines.

use tokenscale_scaling::metrics_source::{ModelRef, ScrapeTarget, ScrapeTargets, TargetKind};

use super::pool::ProcessPool;

/// One model's scrape targets on this machine.
pub struct LocalTargets {
    /// The gateway's `/metrics` URL (one gateway, in this process).
    pub gateway_metrics_url: String,
    /// The model's replicas: those ready are scraped (their load chooses which replica a
    /// scale-in drains).
    pub pool: ProcessPool,
}

impl ScrapeTargets for LocalTargets {
    async fn scrape_targets(&self, _model: &ModelRef) -> Vec<ScrapeTarget> {
        targets(&self.gateway_metrics_url, self.pool.ready_urls().await)
    }
}

/// The gateway, then each ready replica `(name, base URL)` at its `/metrics`.
fn targets(gateway_metrics_url: &str, ready: Vec<(String, String)>) -> Vec<ScrapeTarget> {
    let gateway = ScrapeTarget {
        name: "gateway".to_string(),
        url: gateway_metrics_url.to_string(),
        kind: TargetKind::Gateway,
    };
    let engines = ready.into_iter().map(|(name, url)| ScrapeTarget {
        name,
        url: format!("{url}/metrics"),
        kind: TargetKind::Engine,
    });
    std::iter::once(gateway).chain(engines).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_comes_first_then_each_ready_replica_at_its_metrics_route() {
        let ready = vec![("replica-2".to_string(), "http://127.0.0.1:4100".to_string())];
        let listed = targets("http://127.0.0.1:8080/metrics", ready);
        let seen: Vec<_> = listed
            .iter()
            .map(|t| (t.name.as_str(), t.url.as_str(), t.kind))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "gateway",
                    "http://127.0.0.1:8080/metrics",
                    TargetKind::Gateway
                ),
                (
                    "replica-2",
                    "http://127.0.0.1:4100/metrics",
                    TargetKind::Engine
                ),
            ]
        );
    }
}
