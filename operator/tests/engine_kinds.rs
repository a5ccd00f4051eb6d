//! Every engine kind through the operator: each `examples/*.yaml` renders to exactly its
//! golden file (`operator/tests/golden/<example>.yaml`, what `tokenscale-operator render -f`
//! prints; `TOKENSCALE_BLESS=1` rewrites them after a deliberate change), and a mocked
//! reconcile of each applies the Deployment the pure builder gives for it.

// Shared with the other mocked-API tests; this file uses a part of it.
#[allow(dead_code)]
mod fixtures;

use std::path::PathBuf;

use fixtures::*;
use serde_json::Value;
use tokenscale_operator::children::engine_deployment;
use tokenscale_operator::crd::{EngineKind, ModelDeployment};
use tokenscale_operator::render::{model_deployments, render};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `(file stem, text)` of every example, by name.
fn examples() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(root().join("examples"))
        .expect("examples/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let stem = p
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            (stem, std::fs::read_to_string(&p).expect("readable example"))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_example_renders_to_its_golden_file() {
    let bless = std::env::var_os("TOKENSCALE_BLESS").is_some();
    let mut kinds = Vec::new();
    let mut stale = Vec::new();
    for (stem, text) in examples() {
        let rendered = render(&text, "default").unwrap_or_else(|e| panic!("{stem}: {e}"));
        let golden = root().join(format!("operator/tests/golden/{stem}.yaml"));
        if bless {
            std::fs::write(&golden, &rendered).expect("golden written");
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != rendered {
            stale.push(format!(
                "{stem}: rendered differs from {} (first difference at line {}); rerun with \
                 TOKENSCALE_BLESS=1 if the change is meant",
                golden.display(),
                first_difference(&expected, &rendered)
            ));
        }
        for md in model_deployments(&text, "default").expect("parsed once already") {
            kinds.push(md.spec.engine.kind);
        }
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds, EngineKind::ALL, "an example for every engine kind");
}

fn first_difference(a: &str, b: &str) -> usize {
    a.lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| a.lines().count().min(b.lines().count()))
        + 1
}

/// An example's spec under the name, namespace and uid the mocked API server expects.
fn as_fixture(md: ModelDeployment) -> ModelDeployment {
    let mut value = serde_json::to_value(md).expect("serialises");
    value["metadata"] = serde_json::json!({
        "name": "llama", "namespace": NS, "uid": "uid-1", "generation": 2
    });
    serde_json::from_value(value).expect("parses back")
}

#[tokio::test]
async fn a_mocked_reconcile_applies_every_kind_as_rendered() {
    let mut reconciled = Vec::new();
    for (stem, text) in examples() {
        for md in model_deployments(&text, "default").expect("valid example") {
            if md.spec.replicas.min < 1 {
                continue; // Scale-to-zero examples start without a replica: another scenario.
            }
            let mut md = as_fixture(md);
            // A filled cache holds the Deployment back for its Job: cache_fill_mock.rs.
            if let Some(cache) = md.spec.model.cache.as_mut() {
                cache.fill = None;
            }
            let kind = md.spec.engine.kind;
            let expected = engine_deployment(&md, 1).expect("builds");
            let (result, bodies, _) = run(md, no_metrics(), Scenario::Create).await;
            assert!(result.is_ok(), "{stem}: {result:?}");
            let applied: &Value = &bodies[1];
            assert_eq!(applied["kind"], "Deployment", "{stem}");
            let container = |d: &Value| d["spec"]["template"]["spec"]["containers"][0].clone();
            let expected = serde_json::to_value(expected).expect("serialises");
            assert_eq!(container(applied), container(&expected), "{stem}");
            reconciled.push(kind);
        }
    }
    reconciled.sort();
    reconciled.dedup();
    assert_eq!(reconciled, EngineKind::ALL, "every kind reconciled");
}
