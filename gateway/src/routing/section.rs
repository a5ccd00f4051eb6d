//! The `models:` and `routes:` sections' checks: pools that can be built, routes that lead
//! to a model.

use std::collections::HashSet;

use crate::config::{Config, ConfigError, Discovery, ModelConfig};
use crate::vocab::{KnownModels, ReplicaAddr, check_routes};

/// Refuses an unnamed or repeated model, a pool without slots, a discovered model that also
/// lists upstreams, and an upstream that is not a replica's address.
pub fn validate_section(models: &[ModelConfig]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for model in models {
        let name = &model.name;
        if name.value.trim().is_empty() {
            return Err(ConfigError::invalid(name, "model name is empty"));
        }
        if !names.insert(name.value.as_str()) {
            return Err(ConfigError::invalid(
                name,
                format!("model `{}` listed twice", name.value),
            ));
        }
        if model.replica_concurrency == 0 {
            return Err(ConfigError::invalid(
                name,
                "replica_concurrency must be at least 1",
            ));
        }
        if let Some(slo) = model.slo
            && (slo.tpot_p95_ms == 0 || slo.ttft_p95_ms == Some(0))
        {
            return Err(ConfigError::invalid(
                name,
                "slo.tpot_p95_ms and slo.ttft_p95_ms must be at least 1",
            ));
        }
        if model.discovery == Discovery::Kubernetes && !model.upstreams.is_empty() {
            return Err(ConfigError::invalid(
                name,
                "a model with `discovery: kubernetes` cannot also list `upstreams`",
            ));
        }
        for url in &model.upstreams {
            if let Err(reason) = ReplicaAddr::parse(&url.value) {
                return Err(ConfigError::invalid(url, reason));
            }
        }
    }
    validate_adapters(models)
}

/// Refuses an adapter name that is empty, given twice (in one model or two), or also a
/// model's name (a request could not tell which it means), and adapters on a discovered
/// model (its `ModelDeployment` lists them).
fn validate_adapters(models: &[ModelConfig]) -> Result<(), ConfigError> {
    let mut seen = HashSet::new();
    for model in models {
        for adapter in &model.adapters {
            let name = adapter.value.as_str();
            let reason = if name.trim().is_empty() {
                "adapter name is empty".to_string()
            } else if model.discovery == Discovery::Kubernetes {
                "a model with `discovery: kubernetes` takes its adapters from its \
                 ModelDeployment's `spec.model.adapters`"
                    .to_string()
            } else if models.iter().any(|m| m.name.value == name) {
                format!("adapter `{name}` has the name of a model")
            } else if !seen.insert(name) {
                format!("adapter `{name}` listed twice")
            } else {
                continue;
            };
            return Err(ConfigError::invalid(adapter, reason));
        }
    }
    Ok(())
}

/// Refuses a route that cannot work, at its line: see [`check_routes`]. A target no model of
/// this file serves is refused unless models are also discovered in a cluster.
pub fn validate_routes(config: &Config) -> Result<(), ConfigError> {
    let models: Vec<&str> = config
        .models
        .iter()
        .map(|m| m.name.value.as_str())
        .collect();
    let known = KnownModels {
        is_model: &|name: &str| models.contains(&name),
        // With discovery, `ModelDeployment`s come and go: a target may be served later.
        complete: config.kubernetes.is_none(),
    };
    check_routes(&config.route_specs(), known)
        .map_err(|e| ConfigError::invalid(&config.routes[e.index].name, e.to_string()))?;
    let adapters = || config.models.iter().flat_map(|m| &m.adapters);
    for route in &config.routes {
        if adapters().any(|a| a.value == route.name.value) {
            let reason = format!("route `{}` has the name of an adapter", route.name.value);
            return Err(ConfigError::invalid(&route.name, reason));
        }
    }
    Ok(())
}
