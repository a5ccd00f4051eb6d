//! The pods the operator creates pass the same checks as the chart's: for every
//! `examples/*.yaml` ModelDeployment, `engine_deployment` (the reconciler's pure builder)
//! gives a Deployment that is a valid typed object, passes kubernetes-validate --strict and
//! carries the full pod security context with requests and limits.

use tokenscale_e2e::chart::declared_min_kube_version;
use tokenscale_e2e::k8s_checks::security::check_pod_security;
use tokenscale_e2e::k8s_checks::{Object, Typed};
use tokenscale_e2e::tools::{python_with, run};
use tokenscale_operator::children::cache;
use tokenscale_operator::children::engine_deployment;
use tokenscale_operator::crd::ModelDeployment;

use crate::{NEWEST_KUBE_VERSION, scratch_dir};

/// Every ModelDeployment in examples/*.yaml, as the API server would return it: (file, object).
pub fn examples() -> Vec<(String, ModelDeployment)> {
    tokenscale_e2e::examples::model_deployments()
        .into_iter()
        .map(|(file, doc)| {
            let md = serde_json::from_value(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
            (file, md)
        })
        .collect()
}

#[test]
fn engine_pods_of_every_example_pass_the_pod_security_checks() {
    let examples = examples();
    assert!(
        !examples.is_empty(),
        "no ModelDeployment in examples/*.yaml (the operator issue adds them)"
    );
    let dir = scratch_dir("engine-deployments");
    let mut validate = python_with("kubernetes_validate").unwrap_or_else(|e| panic!("{e}"));
    let declared = declared_min_kube_version().unwrap_or_else(|e| panic!("{e}"));
    validate.args([
        "-m",
        "kubernetes_validate",
        "--strict",
        "--quiet",
        "-k",
        &declared,
        "-k",
        NEWEST_KUBE_VERSION,
    ]);
    let mut problems = Vec::new();
    for (i, (file, md)) in examples.iter().enumerate() {
        let deployment =
            engine_deployment(md, 2).unwrap_or_else(|e| panic!("{file}: engine_deployment: {e}"));
        let value = serde_json::to_value(&deployment).unwrap_or_else(|e| panic!("{file}: {e}"));
        let object = Object::from_value(0, value.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
        let typed = Typed::parse(&object).unwrap_or_else(|e| panic!("{file}: {e}"));
        let pod = typed
            .pod_spec()
            .unwrap_or_else(|| panic!("{file}: the Deployment has no pod spec"));
        problems.extend(
            check_pod_security(&format!("{file}: {}", object.id()), pod)
                .iter()
                .map(ToString::to_string),
        );
        let path = dir.join(format!("example-{i}.json"));
        std::fs::write(&path, value.to_string()).unwrap_or_else(|e| panic!("{e}"));
        validate.arg(path);
        // A filled cache's claim and Job (model.cache.fill) are validated with it.
        let claim = cache::cache_claim(md).unwrap_or_else(|e| panic!("{file}: {e}"));
        let job = cache::fill_job(md).unwrap_or_else(|e| panic!("{file}: {e}"));
        let extra = [
            claim.map(serde_json::to_value),
            job.map(serde_json::to_value),
        ];
        for (k, value) in extra.into_iter().flatten().enumerate() {
            let value = value.unwrap_or_else(|e| panic!("{file}: {e}"));
            let path = dir.join(format!("example-{i}-cache-{k}.json"));
            std::fs::write(&path, value.to_string()).unwrap_or_else(|e| panic!("{e}"));
            validate.arg(path);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let output = run(validate).unwrap_or_else(|e| panic!("kubernetes-validate --strict: {e}"));
    assert!(output.trim().is_empty(), "kubernetes-validate:\n{output}");
}
