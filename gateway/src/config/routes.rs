//! `routes:`: served names that stand for several models, as the static file declares them.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Config, ConfigError};
use crate::vocab::{KnownModels, RouteSpec, RouteTarget, check_routes};

/// One route (`routes[]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// What clients send as `model`.
    pub name: Spanned<String>,
    /// Models (or routes) the requests spread over by weight.
    pub targets: Vec<TargetConfig>,
    /// Tried in order after the targets.
    #[serde(default)]
    pub fallback: Vec<Spanned<String>>,
}

/// One weighted target (`routes[].targets[]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// A served model (or another route).
    pub model: Spanned<String>,
    /// Its share relative to the other targets (default 1; 0: tried only as a fallback).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

impl RouteConfig {
    /// The route as the router takes it.
    pub fn spec(&self) -> RouteSpec {
        RouteSpec {
            name: self.name.value.clone(),
            targets: self
                .targets
                .iter()
                .map(|t| RouteTarget {
                    model: t.model.value.clone(),
                    weight: t.weight,
                })
                .collect(),
            fallback: self.fallback.iter().map(|f| f.value.clone()).collect(),
        }
    }
}

impl Config {
    /// The routes as the router takes them.
    pub fn route_specs(&self) -> Vec<RouteSpec> {
        self.routes.iter().map(RouteConfig::spec).collect()
    }

    /// Refuses a route that cannot work, at its line: see [`check_routes`]. A target no
    /// model of this file serves is refused unless models are also discovered in a cluster.
    pub(super) fn validate_routes(&self) -> Result<(), ConfigError> {
        let models: Vec<&str> = self.models.iter().map(|m| m.name.value.as_str()).collect();
        let known = KnownModels {
            is_model: &|name: &str| models.contains(&name),
            // With discovery, `ModelDeployment`s come and go: a target may be served later.
            complete: self.kubernetes.is_none(),
        };
        check_routes(&self.route_specs(), known)
            .map_err(|e| ConfigError::invalid_route(&self.routes[e.index].name, e.to_string()))
    }
}
