//! Tests of `render`: the children of every ModelDeployment in a file, or a clear refusal.

use super::*;

const VLLM: &str = "apiVersion: tokenscale.dev/v1alpha1\nkind: ModelDeployment\n\
    metadata: {name: llama}\nspec:\n  model: {source: \"hf://org/repo\"}\n  \
    engine: {kind: vllm, gpusPerReplica: 2}\n  replicas: {min: 2, max: 4}\n  \
    slo: {ttftP95: 500ms, tpotP95: 50ms}\n";

#[test]
fn every_child_of_every_model_deployment() {
    let text = format!("{VLLM}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: x}}\n");
    let yaml = render(&text, "models").expect("renders");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).expect("rendered YAML parses");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["Deployment", "Service", "PodDisruptionBudget"]);
    let deployment = &docs[0];
    assert_eq!(deployment["metadata"]["namespace"], "models");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["command"],
        serde_json::json!(["vllm", "serve"])
    );
}

#[test]
fn an_invalid_spec_or_an_empty_file_is_refused_by_name() {
    let tp = VLLM.replace("kind: vllm, ", "");
    let e = render(&tp, "default").expect_err("our engine with 2 GPUs");
    assert!(
        e.to_string()
            .starts_with("ModelDeployment llama: spec.engine.gpusPerReplica"),
        "{e}"
    );
    let e = render("apiVersion: v1\nkind: Service\n", "default").expect_err("nothing");
    assert_eq!(
        e.to_string(),
        "no ModelDeployment in the file (documents of kind: Service)"
    );
    assert!(matches!(
        render("a: [", "default"),
        Err(RenderError::Yaml(_))
    ));
}
