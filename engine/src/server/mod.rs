//! The OpenAI-compatible HTTP server of one replica: `/v1/completions`,
//! `/v1/chat/completions` (both streaming or not), `/v1/models`, `/health`, `/metrics`,
//! `/version`; graceful drain on shutdown.
//!
//! Start one in-process with [`serve`] (binds `config.host:config.port`) or [`serve_on`] (a
//! listener you bound, e.g. on port 0, and a loader you choose).

mod api_key;
mod body;
mod chat;
mod choice;
mod completions;
mod config;
mod deadline;
mod error;
mod fields;
mod generate;
mod listen;
mod load;
mod params;
mod routes;
mod state;
mod structured;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

pub use body::parse_json;
pub use config::ServeConfig;
pub use error::ApiError;
pub use fields::ACCEPTED_IGNORED;
pub use load::{LoadError, load_model, start_engine};
pub use state::{AppState, LoadedModel, Phase};

/// Why a server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("serving HTTP: {0}")]
    Io(#[from] std::io::Error),
}

/// The router over `state` (exposed so tests can drive it with `oneshot`); request bodies
/// must arrive within `body_timeout`.
pub fn router(state: AppState, body_timeout: Duration) -> Router {
    Router::new()
        .route("/v1/completions", post(completions::completions))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/models", get(routes::models))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .route("/version", get(routes::version))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .with_state(state)
        .layer(axum::middleware::from_fn(move |request, next| {
            deadline::limit_body_time(body_timeout, request, next)
        }))
}

/// Binds `config.host:config.port`, loads the model named in `config` and serves until
/// `shutdown` resolves, then drains (see [`serve_on`]).
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let addr = format!("{}:{}", config.host, config.port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let loader_config = config.clone();
    serve_on(
        listener,
        config,
        move || load_model(&loader_config),
        shutdown,
    )
    .await
}

/// Serves on `listener`. `/health` answers 503 while `loader` runs (on a blocking thread),
/// 200 once it returned a model. When `shutdown` resolves: `/health` and new requests get
/// 503, running requests finish (for at most `config.drain_timeout_s`), then this returns.
pub async fn serve_on<L>(
    listener: TcpListener,
    config: ServeConfig,
    loader: L,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError>
where
    L: FnOnce() -> Result<LoadedModel, LoadError> + Send + 'static,
{
    let state = AppState::new(config.served_model_name(), config.max_body_bytes);
    let loading = state.clone();
    tokio::task::spawn_blocking(move || match loader() {
        Ok(model) => {
            tracing::info!(model = loading.served_model_name(), "model loaded; ready");
            loading.set_loaded(model);
        }
        Err(err) => {
            tracing::error!("loading the model failed: {err}");
            loading.set_failed();
        }
    });
    let drain_timeout = Duration::from_secs_f64(config.drain_timeout_s.max(0.0));
    let api_key = config.api_key.clone();
    let draining = state.clone();
    let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
    let drain = async move {
        shutdown.await;
        tracing::info!(in_flight = draining.in_flight(), "shutting down: draining");
        draining.start_draining();
        if tokio::time::timeout(drain_timeout, draining.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = draining.in_flight(),
                "drain timeout: cancelling what is still running"
            );
        }
        let _ = drained_tx.send(());
    };
    let limits = listen::ConnectionLimits {
        max_connections: config.max_connections,
        header_timeout: seconds(config.header_timeout_s),
    };
    let body_timeout = seconds(config.body_timeout_s);
    let server = listen::serve(
        listener,
        api_key::require(router(state, body_timeout), api_key),
        limits,
        drain,
    );
    tokio::select! {
        () = server => Ok(()),
        // Connections still open after the drain (timed-out streams, idle keep-alives) are
        // closed by returning: dropping them cancels their requests.
        _ = async { let _ = drained_rx.await; tokio::time::sleep(Duration::from_secs(1)).await } => Ok(()),
    }
}

/// A configured timeout; one that is not a valid duration (the CLI refuses those) reads as 30 s.
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .unwrap_or(Duration::from_secs(30))
}

/// 404 unless `asked` (if given) is the served model name.
fn check_model(asked: Option<&str>, served: &str) -> Result<(), ApiError> {
    match asked {
        Some(name) if name != served => Err(ApiError::model_not_found(name, served)),
        _ => Ok(()),
    }
}
