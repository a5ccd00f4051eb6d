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
mod lora;
mod params;
mod routes;
mod state;
mod structured;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub use body::parse_json;
pub use config::ServeConfig;
pub use error::ApiError;
pub use fields::ACCEPTED_IGNORED;
pub use load::{LoadError, load_model, start_engine, start_warmed};
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
    /// The engine loop stopped on a fatal error; the process should exit non-zero so the
    /// replica restarts.
    #[error("the engine stopped: {0}")]
    EngineFault(String),
}

/// The router over `state` (exposed so tests can drive it with `oneshot`); request bodies
/// must arrive within `body_timeout`.
pub fn router(state: AppState, body_timeout: Duration) -> Router {
    Router::new()
        .route("/v1/completions", post(completions::completions))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/models", get(routes::models))
        .route("/v1/load_lora_adapter", post(lora::load))
        .route("/v1/unload_lora_adapter", post(lora::unload))
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
/// When the engine loop stops on a fatal error (a lost device) instead: the same drain (the
/// loop has failed every request, so it is short), then [`ServeError::EngineFault`].
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
    let (fault_tx, fault_rx) = oneshot::channel::<String>();
    tokio::spawn(load_then_watch(state.clone(), loader, fault_tx));
    let drain_timeout = Duration::from_secs_f64(config.drain_timeout_s.max(0.0));
    let api_key = config.api_key.clone();
    let draining = state.clone();
    let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
    let drain = async move {
        // A fault channel closed unanswered (the load failed) only disables its branch.
        tokio::select! {
            () = shutdown => {
                tracing::info!(in_flight = draining.in_flight(), "shutting down: draining");
                draining.start_draining();
            }
            Ok(reason) = fault_rx => {
                // `/health` fails already: the phase reads the engine's fault.
                tracing::error!(%reason, "the engine stopped: exiting once its requests are answered");
            }
        }
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
        api_key::require(router(state.clone(), body_timeout), api_key),
        limits,
        drain,
    );
    tokio::select! {
        () = server => {}
        // Connections still open after the drain (timed-out streams, idle keep-alives) are
        // closed by returning: dropping them cancels their requests.
        _ = async { let _ = drained_rx.await; tokio::time::sleep(Duration::from_secs(1)).await } => {}
    }
    match state.fault() {
        Some(reason) => Err(ServeError::EngineFault(reason)),
        None => Ok(()),
    }
}

/// Runs `loader` on a blocking thread and installs its model; then waits for the engine loop
/// to stop on a fatal error and sends the reason on `fault`. Returns early (dropping `fault`)
/// when the load fails, and once nobody listens on `fault` (the server stopped), so that its
/// handle does not keep the engine loop alive.
async fn load_then_watch<L>(state: AppState, loader: L, fault: oneshot::Sender<String>)
where
    L: FnOnce() -> Result<LoadedModel, LoadError> + Send + 'static,
{
    let mut fault = fault;
    let engine = match tokio::task::spawn_blocking(loader).await {
        Ok(Ok(model)) => {
            tracing::info!(model = state.served_model_name(), "model loaded; ready");
            let engine = model.engine.clone();
            state.set_loaded(model);
            engine.metrics().start.serving();
            engine
        }
        Ok(Err(err)) => {
            tracing::error!("loading the model failed: {err}");
            state.set_failed();
            return;
        }
        Err(err) => {
            tracing::error!("loading the model panicked: {err}");
            state.set_failed();
            return;
        }
    };
    tokio::select! {
        reason = engine.fault() => {
            let _ = fault.send(reason);
        }
        () = fault.closed() => {}
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
