//! LoRA adapters over HTTP, with vLLM's routes and bodies: `POST /v1/load_lora_adapter`
//! (`{"lora_name", "lora_path"}`), `POST /v1/unload_lora_adapter` (`{"lora_name"}`), an
//! adapter's name in a request's `model`, and its card on `/v1/models` (`parent`: the base).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokenscale_common::openai::ModelCard;

use super::body::read_json;
use super::state::{AppState, LoadedModel};
use super::{ApiError, check_model};
use crate::lora::{Lookup, LoraAdapter, LoraError};

/// `POST /v1/load_lora_adapter`'s body (vLLM's `LoadLoRAAdapterRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadRequest {
    lora_name: String,
    lora_path: String,
    /// vLLM's: replace an adapter of the same name.
    #[serde(default)]
    load_inplace: bool,
}

/// `POST /v1/unload_lora_adapter`'s body (vLLM's `UnloadLoRAAdapterRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UnloadRequest {
    lora_name: String,
    /// vLLM's internal id, accepted and unused: names identify adapters here.
    #[serde(default)]
    #[allow(dead_code)]
    lora_int_id: Option<u64>,
}

/// Loads an adapter at run time (file reads off the reactor).
pub async fn load(State(state): State<AppState>, request: Request<Body>) -> Response {
    let result = async {
        let (model, _in_flight) = state.admit()?;
        let (_, body): (_, LoadRequest) = read_json(request, state.max_body_bytes()).await?;
        let loras = model.loras.clone();
        let name = body.lora_name.clone();
        tokio::task::spawn_blocking(move || {
            if body.load_inplace && loras.unload(&body.lora_name).is_ok() {
                tracing::info!(adapter = %body.lora_name, "LoRA adapter replaced in place");
            }
            loras.load(&body.lora_name, &body.lora_path)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(lora_error)?;
        tracing::info!(adapter = %name, "LoRA adapter loaded");
        Ok::<_, ApiError>(format!(
            "Success: LoRA adapter '{name}' added successfully."
        ))
    };
    match result.await {
        Ok(text) => (StatusCode::OK, text).into_response(),
        Err(err) => err.into_response(),
    }
}

/// Unloads an adapter: new requests naming it get 404; running ones finish with it.
pub async fn unload(State(state): State<AppState>, request: Request<Body>) -> Response {
    let result = async {
        let (model, _in_flight) = state.admit()?;
        let (_, body): (_, UnloadRequest) = read_json(request, state.max_body_bytes()).await?;
        model.loras.unload(&body.lora_name).map_err(lora_error)?;
        tracing::info!(adapter = %body.lora_name, "LoRA adapter unloaded");
        Ok::<_, ApiError>(format!(
            "Success: LoRA adapter '{}' removed successfully.",
            body.lora_name
        ))
    };
    match result.await {
        Ok(text) => (StatusCode::OK, text).into_response(),
        Err(err) => err.into_response(),
    }
}

/// 404 for a name that is not served, 400 (with the reason) for anything else.
fn lora_error(err: LoraError) -> ApiError {
    match err {
        LoraError::NotFound(_) => ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "not_found_error",
            ..ApiError::invalid_param("lora_name", err.to_string())
        },
        LoraError::Exists(_) => ApiError::invalid_param("lora_name", err.to_string()),
        _ => ApiError::invalid_param("lora_path", err.to_string()),
    }
}

/// The adapter a request's `model` names (`None`: the base model, or no `model`); 404 for a
/// name that is neither. An evicted adapter is read again from its source first.
pub async fn adapter_for(
    asked: Option<&str>,
    state: &AppState,
    model: &LoadedModel,
) -> Result<Option<Arc<LoraAdapter>>, ApiError> {
    let served = state.served_model_name();
    let name = match asked {
        Some(name) if name != served => name,
        _ => return Ok(None),
    };
    match model.loras.lookup(name) {
        Lookup::Loaded(adapter) => Ok(Some(adapter)),
        Lookup::Unknown => check_model(asked, served).map(|()| None),
        Lookup::Evicted => {
            let (loras, name) = (model.loras.clone(), name.to_string());
            let adapter = tokio::task::spawn_blocking(move || loras.reload(&name))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
                .map_err(|e| ApiError::unavailable(e.to_string()))?;
            Ok(Some(adapter))
        }
    }
}

/// The cards of the adapters, after the base model's `base` card (vLLM's shape: `root` the
/// source, `parent` the base model).
pub fn adapter_cards(model: &LoadedModel, base: &ModelCard) -> Vec<ModelCard> {
    model
        .loras
        .list()
        .into_iter()
        .map(|a| ModelCard {
            id: a.name,
            root: Some(a.source),
            parent: Some(base.id.clone()),
            ..base.clone()
        })
        .collect()
}

/// The `model` a response names: the adapter's, else the base model's.
pub fn response_model<'a>(state: &'a AppState, resolved: &'a super::params::Resolved) -> &'a str {
    resolved
        .adapter
        .as_ref()
        .map_or(state.served_model_name(), |a| a.name.as_str())
}
