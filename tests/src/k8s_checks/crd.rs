//! A CRD shipped by the chart must be the generated one (`crds/`): the same object except for
//! the labels and annotations the chart adds to it.

use serde_json::Value;

use super::Violation;
use super::json_diff::differences;

/// Annotation that makes Helm keep an object on uninstall.
pub const KEEP_ANNOTATION: (&str, &str) = ("helm.sh/resource-policy", "keep");

/// Findings when `rendered` (from the chart) differs from `generated` in anything but
/// metadata labels, or annotations named in `added_annotations`, that `generated` lacks.
pub fn check_crd_matches(
    object: &str,
    rendered: &Value,
    generated: &Value,
    added_annotations: &[&str],
) -> Vec<Violation> {
    let mut rendered = rendered.clone();
    strip_added(&mut rendered, generated, "labels", None);
    strip_added(
        &mut rendered,
        generated,
        "annotations",
        Some(added_annotations),
    );
    differences(generated, &rendered)
        .into_iter()
        .map(|path| Violation {
            object: object.into(),
            rule: "CRD equals the generated crds/ file",
            detail: path,
        })
        .collect()
}

/// Removes from `rendered.metadata.<field>` the keys `generated` does not have (only those
/// in `only`, when given), and the map itself when that leaves it empty and `generated` has
/// none.
fn strip_added(rendered: &mut Value, generated: &Value, field: &str, only: Option<&[&str]>) {
    let theirs = generated
        .pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
        .cloned();
    let Some(metadata) = rendered.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(ours) = metadata.get_mut(field).and_then(Value::as_object_mut) else {
        return;
    };
    ours.retain(|key, _| {
        let added = theirs.as_ref().is_none_or(|t| !t.contains_key(key));
        let strippable = only.is_none_or(|names| names.contains(&key.as_str()));
        !(added && strippable)
    });
    if ours.is_empty() && theirs.is_none() {
        metadata.remove(field);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn generated() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "things.example.com"},
               "spec": {"group": "example.com", "versions": [{"name": "v1", "served": true}]}})
    }

    #[test]
    fn added_labels_and_the_keep_annotation_are_allowed() {
        let mut rendered = generated();
        rendered["metadata"]["labels"] = json!({"app.kubernetes.io/part-of": "x"});
        rendered["metadata"]["annotations"] = json!({"helm.sh/resource-policy": "keep"});
        assert!(check_crd_matches("CRD", &rendered, &generated(), &[KEEP_ANNOTATION.0]).is_empty());
    }

    #[test]
    fn a_changed_schema_is_caught() {
        let mut rendered = generated();
        rendered["spec"]["versions"][0]["served"] = json!(false);
        let found = check_crd_matches("CRD", &rendered, &generated(), &[KEEP_ANNOTATION.0]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].detail, "spec.versions[0].served");
    }

    #[test]
    fn an_annotation_the_chart_should_not_add_is_caught() {
        let mut rendered = generated();
        rendered["metadata"]["annotations"] =
            json!({"helm.sh/resource-policy": "keep", "other": "x"});
        let found = check_crd_matches("CRD", &rendered, &generated(), &[KEEP_ANNOTATION.0]);
        assert_eq!(
            found.iter().map(|v| v.detail.as_str()).collect::<Vec<_>>(),
            ["metadata.+annotations"]
        );
    }
}
