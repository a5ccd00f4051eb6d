//! Set-up and tear-down against a `kube::Client` and a helm runner: namespaces, the chart
//! (operator, gateway, CRD), the simulated `ModelDeployment`, and their removal.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokenscale_operator::crd::ModelDeployment;

use crate::plan::{MANAGER, MODEL, OWNER_LABEL, Plan};
use crate::wait::{SuiteError, poll_until};

/// The CRD the chart installs.
pub const CRD_NAME: &str = "modeldeployments.tokenscale.dev";
/// How long `helm --wait` may take for the operator and gateway to be ready.
pub const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs helm with arguments; a trait so the mocked tests record the calls instead.
pub trait HelmRunner {
    /// `helm ARGS...`: its stdout, or the failure with its output.
    fn helm(&self, args: &[String]) -> Result<String, SuiteError>;
}

/// The helm the project's tools use (`$TOKENSCALE_HELM`, else the one scripts/setup
/// installs), with `KUBECONFIG` pointing at the cluster under test.
pub struct ProcessHelm {
    /// The kubeconfig helm talks to.
    pub kubeconfig: PathBuf,
}

impl HelmRunner for ProcessHelm {
    fn helm(&self, args: &[String]) -> Result<String, SuiteError> {
        let binary = tokenscale_e2e::tools::helm().map_err(SuiteError::Helm)?;
        let mut command = std::process::Command::new(binary);
        command.args(args).env("KUBECONFIG", &self.kubeconfig);
        tokenscale_e2e::tools::run(command).map_err(SuiteError::Helm)
    }
}

/// `helm upgrade --install` of the chart into the plan's release namespace with `values`
/// (a file), waiting until the operator and the gateway are ready.
pub fn install_args(plan: &Plan, values: &Path) -> Vec<String> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/tokenscale");
    vec![
        "upgrade".into(),
        "--install".into(),
        plan.release.clone(),
        chart.display().to_string(),
        "--namespace".into(),
        plan.release_namespace.clone(),
        "--values".into(),
        values.display().to_string(),
        "--wait".into(),
        "--timeout".into(),
        format!("{}s", INSTALL_TIMEOUT.as_secs()),
    ]
}

/// `helm uninstall`, waiting for the release's objects (and the CRD: `crds.keep=false`).
pub fn uninstall_args(plan: &Plan) -> Vec<String> {
    vec![
        "uninstall".into(),
        plan.release.clone(),
        "--namespace".into(),
        plan.release_namespace.clone(),
        "--wait".into(),
        "--timeout".into(),
        "120s".into(),
    ]
}

/// Creates the release and model namespaces, labelled with the run.
pub async fn create_namespaces(client: &Client, plan: &Plan) -> Result<(), SuiteError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [&plan.release_namespace, &plan.model_namespace] {
        let namespace: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {OWNER_LABEL: plan.release}}
        }))
        .map_err(SuiteError::Json)?;
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|source| SuiteError::kube(format!("create namespace {name}"), source))?;
    }
    Ok(())
}

/// Installs the chart (values written next to the other temporary files) and waits until the
/// API server serves the CRD.
pub async fn install_chart(
    client: &Client,
    helm: &dyn HelmRunner,
    plan: &Plan,
    values_dir: &Path,
) -> Result<(), SuiteError> {
    let values = values_dir.join(format!("{}-values.json", plan.release));
    let text = serde_json::to_vec_pretty(&plan.values()).map_err(SuiteError::Json)?;
    std::fs::write(&values, text).map_err(|source| SuiteError::Io {
        what: values.display().to_string(),
        source,
    })?;
    helm.helm(&install_args(plan, &values))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let what = format!("the API server to serve {CRD_NAME}");
    poll_until(
        &what,
        Duration::from_secs(60),
        Duration::from_secs(1),
        || {
            let crds = crds.clone();
            async move {
                let crd = crds
                    .get_opt(CRD_NAME)
                    .await
                    .map_err(|source| SuiteError::kube(format!("get {CRD_NAME}"), source))?;
                let established = crd
                    .and_then(|c| c.status)
                    .and_then(|s| s.conditions)
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok(established
                    .then_some(())
                    .ok_or("not Established yet".to_string()))
            }
        },
    )
    .await
}

/// Applies the plan's `ModelDeployment` (server-side apply, the suite as field manager).
pub async fn apply_model(client: &Client, plan: &Plan) -> Result<ModelDeployment, SuiteError> {
    let mds: Api<ModelDeployment> = Api::namespaced(client.clone(), &plan.model_namespace);
    let apply = PatchParams::apply(MANAGER).force();
    mds.patch(MODEL, &apply, &Patch::Apply(plan.model_deployment()))
        .await
        .map_err(|source| SuiteError::kube(format!("apply ModelDeployment {MODEL}"), source))
}

/// Everything before the load: namespaces, chart, model.
pub async fn set_up(
    client: &Client,
    helm: &dyn HelmRunner,
    plan: &Plan,
    values_dir: &Path,
) -> Result<ModelDeployment, SuiteError> {
    create_namespaces(client, plan).await?;
    install_chart(client, helm, plan, values_dir).await?;
    apply_model(client, plan).await
}

/// Removes what [`set_up`] made, whatever exists of it: the release (operator, gateway, CRD
/// and so every ModelDeployment), then both namespaces. Every step is tried; what failed is
/// returned so the caller can say what may be left.
pub async fn tear_down(client: &Client, helm: &dyn HelmRunner, plan: &Plan) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(error) = helm.helm(&uninstall_args(plan)) {
        problems.push(format!("helm uninstall {}: {error}", plan.release));
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [&plan.model_namespace, &plan.release_namespace] {
        match namespaces.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => problems.push(format!("delete namespace {name}: {error}")),
        }
    }
    problems
}
