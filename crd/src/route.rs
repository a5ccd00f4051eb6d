//! `ModelRoute`: a served name that stands for several models — a weighted spread over target
//! models and ordered fallbacks — in the Gateway API Inference Extension's words where they
//! fit (`modelName`, `targetModels[].name`, `targetModels[].weight`). The gateway discovers
//! them like `ModelDeployment`s and routes by them; `tokenscale up` reads them from a
//! multi-document manifest. Each model keeps its own tenant limits, capacity and SLO.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The route clients reach by `modelName`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tokenscale.dev",
    version = "v1alpha1",
    kind = "ModelRoute",
    namespaced,
    shortname = "mr",
    category = "tokenscale",
    doc = "A served name that stands for several models: requests spread over targetModels by \
           weight and fall back over fallbackModels in order, on a tenant limit, on no capacity \
           within the request's deadline, or on a failed upstream.",
    printcolumn(name = "Model name", type_ = "string", json_path = ".spec.modelName"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ModelRouteSpec {
    /// What clients send as `model` (default: the object's name). It may not be a served
    /// model's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub model_name: Option<String>,
    /// Served model names (or other routes' `modelName`s) the requests spread over.
    #[schemars(length(min = 1, max = 16))]
    pub target_models: Vec<TargetModel>,
    /// Tried in order after the targets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub fallback_models: Vec<String>,
}

/// One weighted target of a route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetModel {
    /// A served model name (or another route's `modelName`).
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Its share of the route's requests relative to the other targets (0: only when the
    /// others cannot take a request).
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 1000000))]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

impl ModelRoute {
    /// What clients send as `model`: `spec.modelName`, else the object's name.
    pub fn model_name(&self) -> String {
        self.spec
            .model_name
            .clone()
            .or_else(|| self.metadata.name.clone())
            .unwrap_or_default()
    }
}
