//! A multi-document manifest for `tokenscale up`: several `ModelDeployment`s and the
//! `ModelRoute`s over them, as `kubectl apply -f` takes the same file.

use std::path::Path;

use tokenscale_crd::ModelRoute;
use tokenscale_gateway::routing::route::{KnownModels, check_routes};
use tokenscale_gateway::routing::{RouteSpec, RouteTarget};

use super::UpError;
use super::manifest::{DEFAULT_MANIFEST, Manifest};

/// What `up` runs: each model's manifest, and the routes the gateway serves.
#[derive(Debug, Clone)]
pub struct Manifests {
    /// The models, in the file's order.
    pub deployments: Vec<Manifest>,
    /// The routes, as the gateway takes them.
    pub routes: Vec<RouteSpec>,
}

impl Manifests {
    /// Reads `path`, or the bundled example when `None`.
    pub fn load(path: Option<&Path>) -> Result<Self, UpError> {
        let (text, origin) = match path {
            Some(p) => (
                std::fs::read_to_string(p)
                    .map_err(|e| UpError::Manifest(format!("{}: {e}", p.display())))?,
                p.display().to_string(),
            ),
            None => (
                DEFAULT_MANIFEST.to_string(),
                "the bundled smollm2 example".to_string(),
            ),
        };
        Self::parse(&text).map_err(|e| UpError::Manifest(format!("{origin}: {e}")))
    }

    /// Parses and checks a manifest text of one or more documents.
    pub fn parse(text: &str) -> Result<Self, String> {
        let documents: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(text).map_err(|e| e.to_string())?;
        let documents: Vec<_> = documents.into_iter().filter(|d| !d.is_null()).collect();
        if documents.len() == 1 && documents[0]["kind"] == "ModelDeployment" {
            // One document: parsed from the text, so errors name their line.
            return Ok(Self {
                deployments: vec![Manifest::parse(text)?],
                routes: Vec::new(),
            });
        }
        let mut deployments = Vec::new();
        let mut routes = Vec::new();
        for (index, document) in documents.into_iter().enumerate() {
            let at = |e: String| format!("document {}: {e}", index + 1);
            match document["kind"].as_str() {
                Some("ModelDeployment") => deployments.push(
                    serde_json::from_value::<Manifest>(document)
                        .map_err(|e| at(e.to_string()))?
                        .checked()
                        .map_err(at)?,
                ),
                Some("ModelRoute") => routes.push(route_spec(
                    &serde_json::from_value::<ModelRoute>(document)
                        .map_err(|e| at(e.to_string()))?,
                )),
                other => {
                    return Err(at(format!(
                        "kind is {other:?}, expected ModelDeployment or ModelRoute"
                    )));
                }
            }
        }
        Self::check(deployments, routes)
    }

    /// At least one model, each served name once, and routes that work over them.
    fn check(deployments: Vec<Manifest>, routes: Vec<RouteSpec>) -> Result<Self, String> {
        if deployments.is_empty() {
            return Err("no ModelDeployment: there is nothing to serve".into());
        }
        let names: Vec<String> = deployments.iter().map(Manifest::served_name).collect();
        if let Some(twice) = names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
        {
            return Err(format!("the served name {:?} is declared twice", twice.1));
        }
        let known = KnownModels {
            is_model: &|name: &str| names.iter().any(|n| n == name),
            complete: true,
        };
        check_routes(&routes, known).map_err(|e| e.to_string())?;
        Ok(Self {
            deployments,
            routes,
        })
    }
}

/// A `ModelRoute` as the gateway's route.
fn route_spec(route: &ModelRoute) -> RouteSpec {
    RouteSpec {
        name: route.model_name(),
        targets: route
            .spec
            .target_models
            .iter()
            .map(|t| RouteTarget {
                model: t.name.clone(),
                weight: t.weight,
            })
            .collect(),
        fallback: route.spec.fallback_models.clone(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sim(name: &str) -> String {
        format!(
            "apiVersion: tokenscale.dev/v1alpha1\nkind: ModelDeployment\nmetadata: {{name: {name}}}\n\
             spec:\n  model: {{source: smollm2-135m}}\n  engine: {{backend: sim}}\n  replicas: {{min: 1, max: 2}}\n  slo: {{ttftP95: 2s, tpotP95: 100ms}}\n"
        )
    }

    const ROUTE: &str = "apiVersion: tokenscale.dev/v1alpha1\nkind: ModelRoute\nmetadata: {name: chat}\n\
        spec:\n  targetModels: [{name: a, weight: 3}, {name: b}]\n  fallbackModels: [c]\n";

    #[test]
    fn several_models_and_a_route_read_in_order() {
        let text = format!("{}---\n{}---\n{}---\n{ROUTE}", sim("a"), sim("b"), sim("c"));
        let m = Manifests::parse(&text).unwrap();
        let names: Vec<String> = m.deployments.iter().map(Manifest::served_name).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(m.routes[0].name, "chat");
        assert_eq!(m.routes[0].targets[1].weight, 1);
        assert_eq!(m.routes[0].fallback, ["c"]);
        // One document: the single manifest, as before.
        assert_eq!(
            Manifests::parse(DEFAULT_MANIFEST)
                .unwrap()
                .deployments
                .len(),
            1
        );
    }

    #[test]
    fn what_cannot_run_is_refused_with_its_document_and_reason() {
        let missing = Manifests::parse(&format!("{}---\n{ROUTE}", sim("a"))).unwrap_err();
        assert_eq!(
            missing,
            "route `chat`: `b` is neither a served model nor a route"
        );
        let twice = Manifests::parse(&format!("{}---\n{}", sim("a"), sim("a"))).unwrap_err();
        assert!(twice.contains("declared twice"), "{twice}");
        let alone = Manifests::parse(ROUTE).unwrap_err();
        assert!(alone.contains("no ModelDeployment"), "{alone}");
        let odd = Manifests::parse(&format!("{}---\nkind: Service\n", sim("a"))).unwrap_err();
        assert!(odd.starts_with("document 2: kind is"), "{odd}");
        let bad = sim("b").replace("backend: sim", "backend: cuda");
        let bad = Manifests::parse(&format!("{}---\n{bad}", sim("a"))).unwrap_err();
        assert!(bad.starts_with("document 2: engine.backend"), "{bad}");
    }
}
