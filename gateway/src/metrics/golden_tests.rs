//! The gateway's whole `/metrics` text, byte for byte as captured, over metrics touched
//! everywhere (`TOKENSCALE_BLESS=1` rewrites the file after a deliberate change).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Arrival, Metrics};
use crate::batch::metrics::BatchMetrics;
use crate::batch::types::BatchStatus;
use crate::limits::Limiter;
use crate::routing::{ModelSettings, ReplicaAddr, Router};
use crate::vocab::GatewayShare;
use crate::vocab::Usage;

fn settings() -> ModelSettings {
    ModelSettings {
        replica_concurrency: 4,
        affinity_prefix_chars: 0,
        scrape_metrics: true,
        stale_after_ms: 1000,
        max_queue: 8,
    }
}

fn touched() -> Metrics {
    let metrics = Metrics::default();
    let m = metrics.model("m\"q");
    m.finished(200);
    m.finished(499);
    for v in [0.0005, 0.01, 0.3, 1.0, 7.0, 5000.0] {
        m.ttft.observe(v);
        m.tpot.observe(v);
        m.e2e.observe(v);
        m.queue_time.observe(v);
    }
    m.tokens(Usage {
        prompt_tokens: 10,
        completion_tokens: 4,
        cached_tokens: 6,
    });
    m.usage_source(true);
    m.arrived(Arrival::Queued, 12, 34);
    m.retried();
    let tenant: Arc<str> = Arc::from("t\\1");
    metrics.rate_limited(&tenant, "m\"q", "requests_per_minute");
    metrics.upstream_error("m\"q", "http://127.0.0.1:1", "connect");
    metrics.stream_interrupted("m\"q", "tokens", "resumed");
    metrics.route_served("chat", "m\"q");
    metrics.route_fallback("chat", "m\"q", "none", "overloaded");
    metrics.tenants.of(&tenant, "m\"q").finished(None);
    metrics
}

fn batch_metrics() -> BatchMetrics {
    let batch = BatchMetrics::default();
    batch.answered("m", "t", true, 5, 7);
    batch.answered("m", "t", false, 1, 0);
    batch.set_in_flight("m", 2);
    batch.set_pace("m", 3);
    batch.set_backlog(BTreeMap::from([("m".to_string(), (100, 2.5))]));
    batch.set_statuses([(BatchStatus::InProgress, 1)]);
    batch
}

#[test]
fn the_exposition_is_unchanged_byte_for_byte() {
    let share = Arc::new(GatewayShare::default());
    let router = Router::new(share.clone());
    let pool = router.model_or_insert("m\"q", settings);
    router.model_or_insert("idle", settings);
    for url in ["http://127.0.0.1:1", "http://127.0.0.1:2"] {
        let addr = ReplicaAddr::parse(url).unwrap_or_else(|e| panic!("{e}"));
        let (replica, _) = pool.add(addr);
        replica.record_scrape(3.0, 0.25);
    }
    // An engine we do not control, held to an SLO: its replicas carry an adaptive cap.
    let slo = crate::routing::adaptive::Slo {
        tpot_p95: std::time::Duration::from_millis(50),
        ttft_p95: None,
    };
    pool.set_adaptive_slo(Some(slo));
    // A model serving a LoRA adapter: its affinity counters.
    pool.set_adapters(vec!["sql".into()]);
    let mut text = touched().render(&router);
    super::render_bounds(&mut text, &Limiter::memory(share), router.share(), 5, 1, 2);
    batch_metrics().render(&mut text);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics_golden.txt"
    );
    assert_eq!(tokenscale_scratch::golden(path, &text), text);
}
