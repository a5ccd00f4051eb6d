//! The small routes: `/health`, `/v1/models`, `/metrics`, `/version`, and the fallbacks.

use axum::Json;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokenscale_common::openai::{ModelCard, ModelList};

use super::ApiError;
use super::state::{AppState, Phase};

/// 200 when ready; 503 while loading, draining, after a failed load, or once the engine
/// stopped on a fatal error (whose reason the body carries).
pub async fn health(State(state): State<AppState>) -> Response {
    let (status, text) = match state.phase() {
        Phase::Ready => (StatusCode::OK, "ready"),
        Phase::Loading => (StatusCode::SERVICE_UNAVAILABLE, "loading"),
        Phase::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
        Phase::Failed => (StatusCode::SERVICE_UNAVAILABLE, "failed"),
        Phase::Faulted => (StatusCode::SERVICE_UNAVAILABLE, "faulted"),
    };
    let body = match state.fault() {
        Some(reason) => json!({ "status": text, "error": reason }),
        None => json!({ "status": text }),
    };
    (status, Json(body)).into_response()
}

/// The model this engine serves, then its LoRA adapters.
pub async fn models(State(state): State<AppState>) -> Response {
    let model = state.model();
    let metrics = model.map(|m| m.engine.metrics());
    let card = ModelCard {
        id: state.served_model_name().to_string(),
        object: "model".into(),
        created: state.created_unix_s(),
        owned_by: "tokenscale".into(),
        max_model_len: model.map(|m| m.max_model_len as u64),
        backend: metrics.map(|m| m.backend().to_string()),
        simulated: metrics.map(|m| m.simulated()),
        revision: model.and_then(|m| m.revision.clone()),
        root: None,
        parent: None,
    };
    let adapters = model.map(|m| super::lora::adapter_cards(m, &card));
    let mut data = vec![card];
    data.extend(adapters.into_iter().flatten());
    Json(ModelList {
        object: "list".into(),
        data,
    })
    .into_response()
}

/// Prometheus text exposition (empty until the model has loaded).
pub async fn metrics(State(state): State<AppState>) -> Response {
    let text = state
        .model()
        .map(|m| m.engine.metrics().render())
        .unwrap_or_default();
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}

/// Name and version of the engine.
pub async fn version() -> Response {
    Json(json!({ "name": env!("CARGO_PKG_NAME"), "version": env!("CARGO_PKG_VERSION") }))
        .into_response()
}

/// 404 in the OpenAI error shape.
pub async fn not_found(uri: Uri) -> Response {
    ApiError::route_not_found(uri.path()).into_response()
}

/// 405 in the OpenAI error shape.
pub async fn method_not_allowed() -> Response {
    ApiError::method_not_allowed().into_response()
}
