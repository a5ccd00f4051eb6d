//! The chart's CRDs are the generated `crds/modeldeployments.yaml` and `crds/modelroutes.yaml`
//! (only labels and the keep policy added), and their copies inside the chart are
//! byte-identical to them.

use tokenscale_e2e::k8s_checks::crd::{KEEP_ANNOTATION, check_crd_matches};
use tokenscale_e2e::k8s_checks::parse_documents;
use tokenscale_e2e::tools::workspace_root;

use crate::{default_render, render};
use tokenscale_e2e::chart::{Render, chart_dir};

/// The generated CRDs (operator: `cargo run -p tokenscale-operator --bin crdgen`), each with
/// the chart's copy, which `templates/crd-<plural>.yaml` renders.
const CRDS: [&str; 2] = ["modeldeployments.yaml", "modelroutes.yaml"];

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the operator's crdgen generates crds/ and the chart's copies: cargo run -p tokenscale-operator --bin crdgen)",
            path.display()
        )
    })
}

#[test]
fn the_chart_copy_of_the_crd_is_the_generated_file() {
    for file in CRDS {
        let generated = read(&workspace_root().join("crds").join(file));
        let copy = read(&chart_dir().join("files/crds").join(file));
        assert!(
            copy == generated,
            "charts/tokenscale/files/crds/{file} differs from crds/{file}; run crdgen"
        );
    }
}

#[test]
fn the_rendered_crd_is_the_generated_one_and_is_kept_on_uninstall() {
    let rendered = default_render();
    let crds: Vec<_> = rendered.of_kind("CustomResourceDefinition").collect();
    assert_eq!(crds.len(), CRDS.len(), "the chart renders every CRD");
    for file in CRDS {
        let path = workspace_root().join("crds").join(file);
        let generated = parse_documents(&read(&path)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(generated.len(), 1, "crds/{file} holds one CRD");
        let crd = crds
            .iter()
            .find(|c| c.name == generated[0].name)
            .unwrap_or_else(|| panic!("the chart renders no {}", generated[0].name));
        let found = check_crd_matches(
            &crd.id(),
            &crd.value,
            &generated[0].value,
            &[KEEP_ANNOTATION.0],
        );
        assert!(
            found.is_empty(),
            "{}",
            found
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
        let keep = crd
            .value
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(KEEP_ANNOTATION.0));
        assert_eq!(keep.and_then(|v| v.as_str()), Some(KEEP_ANNOTATION.1));
    }
}

#[test]
fn crds_can_be_left_out_or_not_kept() {
    let without = render(
        "no-crds",
        &Render {
            set: &["crds.install=false"],
            ..Default::default()
        },
    );
    assert_eq!(without.of_kind("CustomResourceDefinition").count(), 0);
    let not_kept = render(
        "not-kept",
        &Render {
            set: &["crds.keep=false"],
            ..Default::default()
        },
    );
    let crd = not_kept
        .of_kind("CustomResourceDefinition")
        .next()
        .unwrap_or_else(|| panic!("no CRD rendered"));
    assert!(
        crd.value
            .pointer("/metadata/annotations/helm.sh~1resource-policy")
            .is_none()
    );
}
