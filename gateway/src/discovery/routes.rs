//! `ModelRoute` objects as the router's routes: read as `DynamicObject`s (this crate does not
//! depend on the operator), oldest first, so that of two routes claiming one name the oldest
//! is served (the rule for served names too).

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::DynamicObject;
use tokenscale_common::served_name::ServedNames;

use crate::routing::{RouteSpec, RouteTarget};

/// Group, version and kind of the custom resource.
pub const MODEL_ROUTE: (&str, &str, &str) = ("tokenscale.dev", "v1alpha1", "ModelRoute");

/// The routes `objects` declare, oldest first; an object whose spec cannot be read, or whose
/// namespace may not claim its name (`names`, as for served names), is left out and logged.
pub fn routes_of(objects: &[Arc<DynamicObject>], names: &ServedNames) -> Vec<RouteSpec> {
    let mut dated: Vec<(Option<i64>, String, String, &DynamicObject)> = objects
        .iter()
        .map(|o| {
            let created_s = o.creation_timestamp().map(|t| t.0.as_second());
            (
                created_s,
                o.namespace().unwrap_or_default(),
                o.name_any(),
                &**o,
            )
        })
        .collect();
    dated.sort_by(|a, b| (a.0, &a.1, &a.2).cmp(&(b.0, &b.1, &b.2)));
    dated
        .into_iter()
        .filter_map(|(_, namespace, name, object)| {
            let Some(spec) = spec_of(object) else {
                tracing::warn!(%namespace, %name, "a ModelRoute without targetModels is ignored");
                return None;
            };
            if !names.allows(&namespace, &spec.name) {
                tracing::warn!(%namespace, %name, route = %spec.name, "the namespace may not claim this name (kubernetes.served_names): the ModelRoute is ignored");
                return None;
            }
            Some(spec)
        })
        .collect()
}

/// One object's route: `spec.modelName` (else its name), its weighted targets (weight 1
/// unless given) and its fallbacks.
fn spec_of(object: &DynamicObject) -> Option<RouteSpec> {
    let spec = &object.data["spec"];
    let name = spec["modelName"]
        .as_str()
        .map_or_else(|| object.name_any(), str::to_string);
    let targets: Vec<RouteTarget> = spec["targetModels"]
        .as_array()?
        .iter()
        .filter_map(|t| {
            let weight = t["weight"]
                .as_u64()
                .map_or(Some(1), |w| u32::try_from(w).ok())?;
            Some(RouteTarget {
                model: t["name"].as_str()?.to_string(),
                weight,
            })
        })
        .collect();
    let fallback = spec["fallbackModels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect();
    (!targets.is_empty()).then_some(RouteSpec {
        name,
        targets,
        fallback,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind};

    fn route(
        namespace: &str,
        name: &str,
        created_s: i64,
        spec: serde_json::Value,
    ) -> Arc<DynamicObject> {
        let (group, version, kind) = MODEL_ROUTE;
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let mut object = DynamicObject::new(name, &resource).within(namespace);
        object.data = serde_json::json!({ "spec": spec });
        let created = k8s_openapi::jiff::Timestamp::from_second(created_s).expect("valid time");
        object.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created),
        );
        Arc::new(object)
    }

    #[test]
    fn objects_become_routes_oldest_first_with_default_weights_and_names() {
        let newer = route(
            "team-b",
            "chat",
            200,
            serde_json::json!({"modelName": "chat", "targetModels": [{"name": "qwen3-8b"}]}),
        );
        let older = route(
            "team-a",
            "chat",
            100,
            serde_json::json!({
                "targetModels": [{"name": "llama-3-8b", "weight": 3}, {"name": "qwen3-8b", "weight": 1}],
                "fallbackModels": ["smollm2-135m"],
            }),
        );
        let empty = route(
            "team-a",
            "empty",
            50,
            serde_json::json!({"targetModels": []}),
        );
        let specs = routes_of(
            &[newer.clone(), empty, older.clone()],
            &ServedNames::default(),
        );
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].name, "chat");
        assert_eq!(specs[0].targets[0].model, "llama-3-8b");
        assert_eq!(specs[0].targets[0].weight, 3);
        assert_eq!(specs[0].fallback, ["smollm2-135m"]);
        assert_eq!(specs[1].targets[0].weight, 1);
        // With a served-names list, a namespace claims only the route names it is given.
        let mut names = ServedNames::default();
        names.add_flag("team-a=chat").expect("parses");
        let specs = routes_of(&[newer, older], &names);
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].targets[0].model, "llama-3-8b");
    }
}
