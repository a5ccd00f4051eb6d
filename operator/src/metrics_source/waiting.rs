//! Scale from zero within a second, not at the next period: the gateway's admission-queue
//! gauges are polled every second, and each model whose queue has just become non-empty is
//! named on a channel, for the controller to decide on at once (a model at zero replicas
//! queues every request it gets, so that is the moment its first request arrived).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::join_all;
use tokenscale_common::metrics::{LABEL_MODEL_NAME, gateway};
use tokio::sync::mpsc;

use super::source::{GatewayTargets, ScrapeSource};
use super::text_format::Sample;

/// How often the gateway's queues are polled.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// Served names with requests waiting in a gateway's admission queue, from its samples.
pub fn queued_models(samples: &[Sample]) -> BTreeSet<String> {
    samples
        .iter()
        .filter(|s| s.name == gateway::QUEUE_DEPTH && s.value > 0.0)
        .filter_map(|s| s.label(LABEL_MODEL_NAME).map(str::to_string))
        .collect()
}

/// Which models' queues became non-empty between two polls (an edge, so a model that stays
/// queued while its first replica starts is named once, not every second).
#[derive(Debug, Clone, Default)]
pub struct QueueEdges {
    queued: BTreeSet<String>,
}

impl QueueEdges {
    /// Takes this poll's queued models; returns those that were not queued at the last one.
    pub fn update(&mut self, queued: BTreeSet<String>) -> Vec<String> {
        let fresh = queued.difference(&self.queued).cloned().collect();
        self.queued = queued;
        fresh
    }
}

impl ScrapeSource {
    /// Polls the gateway's `/metrics` every [`POLL_EVERY`] and sends the served name of each
    /// model whose admission queue has just become non-empty; ends when the receiver is
    /// dropped. Without a gateway it returns at once: engines have no queue for a model at
    /// zero replicas. A poll that reaches no gateway changes nothing.
    pub async fn watch_queues(&self, sender: mpsc::Sender<String>) {
        if self.gateway == GatewayTargets::None {
            return;
        }
        let mut edges = QueueEdges::default();
        let mut ticks = tokio::time::interval(POLL_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let urls = self.gateway_urls().await;
            let scraped = join_all(urls.iter().map(|url| self.scrapes.get(url))).await;
            let answered: Vec<_> = scraped.into_iter().filter_map(Result::ok).collect();
            if answered.is_empty() {
                continue;
            }
            let queued = answered
                .iter()
                .flat_map(|exposition| queued_models(&exposition.samples))
                .collect();
            for model in edges.update(queued) {
                if sender.send(model).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::text_format::parse;
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn models_with_a_waiting_request_are_read_from_the_queue_gauge() {
        let text = format!(
            "{q}{{model_name=\"cold\"}} 2\n{q}{{model_name=\"idle\"}} 0\n\
             {f}{{model_name=\"busy\"}} 9\n",
            q = gateway::QUEUE_DEPTH,
            f = gateway::IN_FLIGHT_REQUESTS,
        );
        assert_eq!(queued_models(&parse(&text).samples), set(&["cold"]));
    }

    /// A stand-in gateway answering every `/metrics` with `model`'s queue at `depth()`.
    async fn gateway(depth: std::sync::Arc<std::sync::atomic::AtomicU64>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                let depth = depth.load(std::sync::atomic::Ordering::SeqCst);
                let body = format!("{}{{model_name=\"cold\"}} {depth}\n", gateway::QUEUE_DEPTH);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            }
        });
        format!("http://{addr}/metrics")
    }

    /// The first request queued at a model with no replica is named at the next poll (a
    /// second; the bound leaves room for a slow machine, far below a 15 s period), once.
    #[tokio::test]
    async fn a_queue_that_fills_is_named_within_a_second() {
        let depth = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (service, _api) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let source = ScrapeSource {
            client: kube::Client::new(service, "default"),
            gateway: GatewayTargets::Urls(vec![gateway(depth.clone()).await]),
            endpoints: Default::default(),
            scrapes: Default::default(),
        };
        let (sender, mut named) = mpsc::channel(4);
        let watch = tokio::spawn(async move { source.watch_queues(sender).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(named.try_recv().is_err(), "nothing queued yet");
        depth.store(1, std::sync::atomic::Ordering::SeqCst);
        let first = tokio::time::timeout(Duration::from_secs(3), named.recv()).await;
        assert_eq!(first.ok().flatten().as_deref(), Some("cold"));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(named.try_recv().is_err(), "still queued: not named again");
        drop(named);
        watch.abort();
    }

    #[test]
    fn a_model_is_named_when_its_queue_fills_not_while_it_stays_full() {
        let mut edges = QueueEdges::default();
        assert_eq!(edges.update(set(&["a"])), ["a"]);
        assert_eq!(edges.update(set(&["a", "b"])), ["b"]);
        assert!(edges.update(set(&["a", "b"])).is_empty());
        assert!(edges.update(set(&[])).is_empty());
        assert_eq!(
            edges.update(set(&["a"])),
            ["a"],
            "queued again after emptying"
        );
    }
}
