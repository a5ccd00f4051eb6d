//! Small HTTP reads of the local processes: an engine's `/health` and load, any `/metrics`.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokenscale_common::engines;

/// A pooled client for probes, each bounded by a short timeout.
#[derive(Clone)]
pub struct Probe(Client<HttpConnector, Empty<Bytes>>);

impl Probe {
    /// A probe client.
    pub fn new() -> Self {
        Self(Client::builder(TokioExecutor::new()).build(HttpConnector::new()))
    }

    /// `(status, body)` of `GET url`, or `None` on any failure within 2 s.
    pub async fn get(&self, url: &str) -> Option<(u16, String)> {
        let request = http::Request::get(url).body(Empty::new()).ok()?;
        let exchange = async {
            let response = self.0.request(request).await.ok()?;
            let status = response.status().as_u16();
            let bytes = response.into_body().collect().await.ok()?.to_bytes();
            Some((status, String::from_utf8_lossy(&bytes).into_owned()))
        };
        tokio::time::timeout(Duration::from_secs(2), exchange)
            .await
            .ok()?
    }

    /// Whether `base/health` answers 200.
    pub async fn healthy(&self, base: &str) -> bool {
        self.get(&format!("{base}/health"))
            .await
            .is_some_and(|(s, _)| s == 200)
    }

    /// Requests running plus waiting on the engine at `base`, read by the adapter of the
    /// engine its `/metrics` names (0 when it does not answer or exports neither).
    pub async fn in_flight(&self, base: &str) -> f64 {
        let Some((_, text)) = self.get(&format!("{base}/metrics")).await else {
            return 0.0;
        };
        let Some(reading) = engines::read_text(&text) else {
            return 0.0;
        };
        reading.running_requests.unwrap_or(0.0) + reading.waiting_requests.unwrap_or(0.0)
    }
}
