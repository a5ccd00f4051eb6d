//! The Helm chart as the tests see it: where it lives, the values files CI renders it with,
//! the Kubernetes version it declares, and `helm lint` / `helm template` runs against it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tools::{ToolError, helm, run, workspace_root};

/// The chart, relative to the workspace root.
pub const CHART_DIR: &str = "charts/tokenscale";
/// Release name the tests render with.
pub const RELEASE: &str = "tokenscale";
/// Namespace the tests render into.
pub const NAMESPACE: &str = "tokenscale-system";
/// The Prometheus Operator API the monitoring templates are gated on.
pub const MONITORING_API: &str = "monitoring.coreos.com/v1";

/// Why the chart's metadata could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// Chart.yaml is unreadable or not YAML.
    #[error("{path}: {reason}")]
    ChartYaml {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// The chart folder.
pub fn chart_dir() -> PathBuf {
    workspace_root().join(CHART_DIR)
}

/// `ci/*-values.yaml`, sorted: every one is linted and rendered in CI.
pub fn ci_values_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("ci"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("-values.yaml"))
        })
        .collect();
    files.sort();
    files
}

/// The lowest Kubernetes version Chart.yaml's `kubeVersion` admits (`">=1.33.0-0"` →
/// `"1.33.0"`): the version manifests are validated against.
pub fn declared_min_kube_version() -> Result<String, ChartError> {
    let path = chart_dir().join("Chart.yaml");
    let error = |reason: String| ChartError::ChartYaml {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| error(e.to_string()))?;
    let chart: serde_json::Value =
        serde_saphyr::from_str(&text).map_err(|e| error(e.to_string()))?;
    let constraint = chart["kubeVersion"]
        .as_str()
        .ok_or_else(|| error("no kubeVersion".into()))?;
    let version = constraint
        .trim()
        .strip_prefix(">=")
        .ok_or_else(|| {
            error(format!(
                "kubeVersion {constraint:?} is not a \">=X.Y.Z\" lower bound"
            ))
        })?
        .trim()
        .trim_end_matches("-0");
    let parts: Vec<&str> = version.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.parse::<u32>().is_err()) {
        return Err(error(format!(
            "kubeVersion {constraint:?} has no X.Y.Z version"
        )));
    }
    Ok(version.to_string())
}

/// How one render is made.
#[derive(Debug, Clone, Default)]
pub struct Render<'a> {
    /// A values file, or the chart's defaults.
    pub values: Option<&'a Path>,
    /// Pretend the cluster serves `monitoring.coreos.com/v1` (ServiceMonitor, PodMonitor).
    pub monitoring_api: bool,
    /// `--set` assignments.
    pub set: &'a [&'a str],
    /// `--kube-version`, when not Helm's default.
    pub kube_version: Option<&'a str>,
    /// More `--api-versions` the cluster pretends to serve (`group/version/Kind`).
    pub api_versions: &'a [&'a str],
}

impl Render<'_> {
    fn args(&self, command: &mut Command) {
        if let Some(values) = self.values {
            command.arg("--values").arg(values);
        }
        for assignment in self.set {
            command.args(["--set", assignment]);
        }
    }

    /// `helm template`: the rendered manifests (tests included) as one YAML stream.
    pub fn template(&self) -> Result<String, ToolError> {
        let mut command = Command::new(helm()?);
        command
            .args(["template", RELEASE])
            .arg(chart_dir())
            .args(["--namespace", NAMESPACE]);
        if self.monitoring_api {
            command.args(["--api-versions", MONITORING_API]);
        }
        if let Some(version) = self.kube_version {
            command.args(["--kube-version", version]);
        }
        for api in self.api_versions {
            command.args(["--api-versions", api]);
        }
        self.args(&mut command);
        run(command)
    }

    /// `helm lint --strict` (warnings fail too); the output on success.
    pub fn lint(&self) -> Result<String, ToolError> {
        let mut command = Command::new(helm()?);
        command
            .args(["lint", "--strict"])
            .arg(chart_dir())
            .args(["--namespace", NAMESPACE]);
        self.args(&mut command);
        run(command)
    }

    /// `helm install --dry-run=client`: what `helm install` prints, NOTES included.
    pub fn install_dry_run(&self) -> Result<String, ToolError> {
        let mut command = Command::new(helm()?);
        command.args(["install", RELEASE]).arg(chart_dir()).args([
            "--namespace",
            NAMESPACE,
            "--dry-run=client",
        ]);
        self.args(&mut command);
        run(command)
    }
}
