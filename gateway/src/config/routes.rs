//! `routes:`: served names that stand for several models, as the static file declares them.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::Config;
use crate::vocab::{RouteSpec, RouteTarget};

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
}
