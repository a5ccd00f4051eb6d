//! The Prometheus Operator kinds the chart renders (`monitoring.coreos.com/v1`), typed with
//! the fields tokenscale uses and nothing else: k8s-openapi has no types for them, and an
//! unknown field must fail here as it would for a built-in kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

/// `ServiceMonitor`: scrape the endpoints of Services matching `selector`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceMonitor {
    /// Always `monitoring.coreos.com/v1`.
    pub api_version: String,
    /// Always `ServiceMonitor`.
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// What to scrape.
    pub spec: ServiceMonitorSpec,
}

/// `ServiceMonitor.spec`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceMonitorSpec {
    /// Services to scrape.
    pub selector: LabelSelector,
    /// Namespaces to look in (the monitor's own when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Ports and paths to scrape.
    pub endpoints: Vec<Endpoint>,
}

/// `PodMonitor`: scrape the pods matching `selector`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodMonitor {
    /// Always `monitoring.coreos.com/v1`.
    pub api_version: String,
    /// Always `PodMonitor`.
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// What to scrape.
    pub spec: PodMonitorSpec,
}

/// `PodMonitor.spec`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodMonitorSpec {
    /// Pods to scrape.
    pub selector: LabelSelector,
    /// Namespaces to look in (the monitor's own when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Ports and paths to scrape.
    pub pod_metrics_endpoints: Vec<Endpoint>,
}

/// Which namespaces a monitor looks in: all (`any`) or the listed ones.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceSelector {
    /// Every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<bool>,
    /// These namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_names: Option<Vec<String>>,
}

/// One scrape endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    /// Named port.
    pub port: String,
    /// HTTP path, `/metrics` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Scrape interval such as `15s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Keep the target's own labels (e.g. `namespace`) on a clash instead of renaming them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub honor_labels: Option<bool>,
}
