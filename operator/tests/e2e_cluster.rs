//! Real-cluster suite: installs the CRD, applies `examples/smollm2.yaml` and waits until the
//! ModelDeployment's `Ready` condition is `True` (with the operator running in the cluster).
//!
//! Runs only when `TOKENSCALE_E2E_KUBECONFIG` names a kubeconfig; otherwise it prints that it
//! was not run and passes. Run it with:
//! `TOKENSCALE_E2E_KUBECONFIG=~/.kube/config cargo test -p tokenscale-operator --test e2e_cluster -- --nocapture`

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, CustomResourceExt};
use tokenscale_operator::crd::ModelDeployment;

const NAMESPACE: &str = "tokenscale-e2e";

#[tokio::test]
async fn example_becomes_ready_on_a_real_cluster() {
    let Ok(path) = std::env::var("TOKENSCALE_E2E_KUBECONFIG") else {
        eprintln!("e2e_cluster: NOT RUN — set TOKENSCALE_E2E_KUBECONFIG to a kubeconfig to run it");
        return;
    };
    let kubeconfig = Kubeconfig::read_from(&path).expect("readable kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig");
    let client = Client::try_from(config).expect("client");
    let apply = PatchParams::apply("tokenscale-e2e").force();

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "modeldeployments.tokenscale.dev",
        &apply,
        &Patch::Apply(ModelDeployment::crd()),
    )
    .await
    .expect("CRD installs");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    namespaces
        .patch(NAMESPACE, &apply, &Patch::Apply(ns))
        .await
        .expect("namespace");
    // The API server needs a moment to serve a new CRD.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/smollm2.yaml"
    ))
    .expect("example");
    let md: ModelDeployment = serde_saphyr::from_str(&text).expect("example parses");
    let mds: Api<ModelDeployment> = Api::namespaced(client, NAMESPACE);
    mds.patch("smollm2", &apply, &Patch::Apply(&md))
        .await
        .expect("example applies");

    let deadline = Instant::now() + Duration::from_secs(600);
    let ready = loop {
        let current = mds.get("smollm2").await.expect("readable");
        let condition = current
            .status
            .as_ref()
            .and_then(|s| s.condition("Ready").cloned());
        if condition.as_ref().is_some_and(|c| c.status == "True") {
            break true;
        }
        if Instant::now() > deadline {
            eprintln!("last Ready condition: {condition:?}");
            break false;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    let _ = mds.delete("smollm2", &DeleteParams::default()).await;
    assert!(ready, "smollm2 did not become Ready within 10 minutes");
}
