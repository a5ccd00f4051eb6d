//! The operator's HTTP endpoint: `/metrics` (Prometheus text) and `/health`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::Metrics;

/// The router serving `/metrics` and `/health`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/health", get(|| async { "ok" }))
        .with_state(metrics)
}

async fn metrics_handler(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        metrics.encode(),
    )
}

/// Serves [`router`] on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router(metrics)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_metrics_and_health_on_loopback() {
        let metrics = Arc::new(Metrics::default());
        metrics.reconciliations.inc();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(axum::serve(listener, router(metrics)).into_future());
        let body = crate::metrics_source::scrape::fetch_text(&format!("http://{addr}/metrics"))
            .await
            .expect("scrape");
        assert!(
            body.contains("tokenscale_operator_reconciliations_total 1"),
            "{body}"
        );
        let health =
            crate::metrics_source::scrape::fetch_text(&format!("http://{addr}/health")).await;
        assert_eq!(health.ok().as_deref(), Some("ok"));
        server.abort();
    }
}
