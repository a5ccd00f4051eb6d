//! What one run installs, as plain data: names unique to the run, the images it was told,
//! the chart's values and the `ModelDeployment` — no I/O, so the mocked tests check them.

use serde_json::{Value, json};

/// The variable naming the kubeconfig of the cluster to run against.
pub const KUBECONFIG_VAR: &str = "TOKENSCALE_E2E_KUBECONFIG";
/// Image repositories are `<prefix>/operator`, `<prefix>/gateway`, `<prefix>/engine`.
pub const IMAGE_PREFIX_VAR: &str = "TOKENSCALE_E2E_IMAGE_PREFIX";
/// The tag of all three images.
pub const IMAGE_TAG_VAR: &str = "TOKENSCALE_E2E_IMAGE_TAG";
/// Field manager of everything the suite applies.
pub const MANAGER: &str = "tokenscale-e2e";
/// Label on the namespaces the suite creates, so a person can find leftovers.
pub const OWNER_LABEL: &str = "tokenscale.dev/e2e-run";
/// Name and served name of the simulated model.
pub const MODEL: &str = "sim-e2e";
/// Replica bounds of the model: the suite watches it leave `MIN` and come back to it.
pub const MIN_REPLICAS: i32 = 1;
/// Most replicas the model may scale to.
pub const MAX_REPLICAS: i32 = 3;

/// Why the suite does not run here, or `None` when a kubeconfig is given.
pub fn not_run_reason(kubeconfig: Option<&str>) -> Option<String> {
    match kubeconfig {
        Some(path) if !path.trim().is_empty() => None,
        _ => Some(format!(
            "{KUBECONFIG_VAR} is not set (see operator/README.md, \"Running the real-cluster suite\")"
        )),
    }
}

/// The images the chart and the model run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    /// Repository prefix, e.g. `tokenscale` or `registry.example/team`.
    pub prefix: String,
    /// Tag of every image.
    pub tag: String,
}

impl Images {
    /// From the environment: `TOKENSCALE_E2E_IMAGE_PREFIX` (default `tokenscale`, the names
    /// docker/*.Dockerfile build) and `TOKENSCALE_E2E_IMAGE_TAG` (default this version).
    pub fn from_env() -> Self {
        let read = |var: &str, default: &str| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        Self {
            prefix: read(IMAGE_PREFIX_VAR, "tokenscale")
                .trim_end_matches('/')
                .to_string(),
            tag: read(IMAGE_TAG_VAR, env!("CARGO_PKG_VERSION")),
        }
    }

    fn repository(&self, component: &str) -> String {
        format!("{}/{component}", self.prefix)
    }

    /// The engine image the `ModelDeployment` names.
    pub fn engine(&self) -> String {
        format!("{}:{}", self.repository("engine"), self.tag)
    }
}

/// One run: where the chart goes, where the model goes, which images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Helm release name; it contains "tokenscale", so objects are `<release>-<component>`.
    pub release: String,
    /// Namespace of the operator, the gateway and the release.
    pub release_namespace: String,
    /// Namespace of the `ModelDeployment` and its replicas.
    pub model_namespace: String,
    /// Images to install.
    pub images: Images,
}

impl Plan {
    /// A plan whose names end in `run_id` (lowercase letters and digits), so runs never share
    /// a namespace and a leftover names its run.
    pub fn new(run_id: &str, images: Images) -> Self {
        Self {
            release: format!("tokenscale-e2e-{run_id}"),
            release_namespace: format!("tokenscale-e2e-{run_id}"),
            model_namespace: format!("tokenscale-e2e-{run_id}-models"),
            images,
        }
    }

    /// The gateway's Service, as the chart names it.
    pub fn gateway_service(&self) -> String {
        format!("{}-gateway", self.release)
    }

    /// The chart's values: the images told, one pod of each (no Redis, no claim the cluster
    /// may lack), keyless requests charged to a tenant, and the CRD removed on uninstall.
    pub fn values(&self) -> Value {
        let image = |component: &str| {
            json!({"repository": self.images.repository(component), "tag": self.images.tag,
                   "pullPolicy": "IfNotPresent"})
        };
        json!({
            "crds": {"install": true, "keep": false},
            // The chart is namespaced by default (the `default` namespace only): the operator
            // and the gateway watch the run's two namespaces.
            "watchNamespaces": [self.release_namespace, self.model_namespace],
            "operator": {"replicas": 1, "image": image("operator"),
                         "leaderElection": {"enabled": false}},
            "gateway": {
                "replicas": 1,
                "image": image("gateway"),
                "anonymousTenant": "e2e",
                "tenants": {"list": [{"name": "e2e", "keys": []}]},
                "drainTimeoutSeconds": 5
            },
            "redis": {"enabled": false},
            "dashboards": {"enabled": false}
        })
    }

    /// The simulated model: 1 to 3 replicas, capacity assumed low and windows short, so a few
    /// concurrent streams raise it within a minute or two and silence brings it back.
    pub fn model_deployment(&self) -> Value {
        json!({
            "apiVersion": "tokenscale.dev/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": MODEL, "namespace": self.model_namespace},
            "spec": {
                "model": {"source": MODEL, "servedName": MODEL},
                "engine": {"backend": "sim", "image": self.images.engine(),
                           "args": ["--max-num-seqs", "4"], "drainTimeout": "5s"},
                "replicas": {"min": MIN_REPLICAS, "max": MAX_REPLICAS},
                "slo": {"ttftP95": "500ms", "tpotP95": "50ms"},
                "scaling": {"stableWindow": "20s", "panicWindow": "4s", "period": "2s",
                            "scaleDownStabilization": "20s", "maxScaleDownRate": 1.0,
                            "initialTokensPerSecondPerGpu": 40, "startupTime": "10s"}
            }
        })
    }
}

/// A run id from the clock and the process: lowercase, short, distinct between runs.
pub fn run_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{:x}{:x}", secs % 0x10_0000, std::process::id() % 0x1000)
}
