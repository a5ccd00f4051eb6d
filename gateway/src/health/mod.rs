//! Active health checks and load scraping: one small task per replica.

mod lora;
mod scrape;
mod section;

pub use scrape::{Scraped, parse_engine_load, parse_scrape};
pub use section::validate_section;

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};

use crate::proxy::UpstreamClient;
use crate::routing::{ModelPool, Replica, ReplicaState};

/// How a replica is probed.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Period of probes and scrapes (≤ 1 s).
    pub interval: Duration,
    /// Timeout of one probe.
    pub timeout: Duration,
    /// Whether to scrape `/metrics` for the engine's queue and KV usage.
    pub scrape_metrics: bool,
}

/// Probes `/health` (and scrapes `/metrics`) of `replica` every interval until the replica
/// is gone: a good probe makes a starting or ejected replica ready (the recovery probe
/// after a passive ejection), a failed one ejects it.
pub async fn watch_replica(
    replica: Weak<Replica>,
    pool: Arc<ModelPool>,
    client: UpstreamClient,
    settings: ProbeSettings,
) {
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(replica) = replica.upgrade() else {
            return;
        };
        let healthy = matches!(get(&client, &replica, "/health", settings.timeout).await, Some((status, _)) if status.is_success());
        let state = replica.state();
        let changed = match (healthy, state) {
            (true, ReplicaState::Starting | ReplicaState::Ejected) => {
                pool.set_replica_state(&replica, ReplicaState::Ready)
            }
            (false, ReplicaState::Starting | ReplicaState::Ready) => {
                pool.set_replica_state(&replica, ReplicaState::Ejected)
            }
            _ => false,
        };
        if changed {
            tracing::info!(replica = %replica.addr.url, healthy, "replica state changed");
        }
        if healthy
            && settings.scrape_metrics
            && let Some((status, body)) = get(&client, &replica, "/metrics", settings.timeout).await
            && let (true, Some(scraped)) = (status.is_success(), parse_scrape(&body))
        {
            replica.record_engine(scraped.kind);
            if let Some((waiting, kv)) = scraped.load {
                replica.record_scrape(waiting, kv);
            }
            if let Some(lora) = &scraped.lora {
                replica.record_adapters(lora);
            }
        }
    }
}

/// GETs `path` on the replica; `None` on any transport failure or timeout.
async fn get(
    client: &UpstreamClient,
    replica: &Replica,
    path: &str,
    timeout: Duration,
) -> Option<(StatusCode, Bytes)> {
    let uri = replica.addr.uri(path).ok()?;
    let request = Request::get(uri)
        .header(http::header::HOST, replica.addr.authority.as_str())
        .body(Full::new(Bytes::new()))
        .ok()?;
    let exchange = async {
        let response = client.send(request, &replica.addr).await.ok()?;
        let status = response.status();
        let body = Limited::new(response.into_body(), 4 << 20)
            .collect()
            .await
            .ok()?
            .to_bytes();
        Some((status, body))
    };
    tokio::time::timeout(timeout, exchange).await.ok().flatten()
}
