//! Routes: a served name that stands for several models — a weighted spread over targets
//! (canary, A/B) and ordered fallbacks — each model keeping its own tenant limits, capacity
//! and SLO. Pure: which models a request tries, in which order; the layer that tries them
//! is [`layer`].

mod layer;
#[cfg(test)]
mod tests;

/// Kept here too: routes are declared and checked in the words of `vocab/`.
pub use crate::vocab::{KnownModels, RouteError, RouteSpec, RouteTarget, check_routes};
pub use layer::{FallbackLayer, Fallbacks};

use std::sync::Mutex;

/// A route with its spread state.
#[derive(Debug)]
pub struct Route {
    spec: RouteSpec,
    /// Smooth weighted round robin (nginx's): each target's running credit. It gives every
    /// target exactly its share over any window of `sum(weights)` picks, interleaved, where
    /// a random pick would stray by a few percent over a thousand requests.
    credit: Mutex<Vec<i64>>,
}

impl Route {
    /// A route from its declaration.
    pub fn new(spec: RouteSpec) -> Self {
        let credit = Mutex::new(vec![0; spec.targets.len()]);
        Self { spec, credit }
    }

    /// Its declaration.
    pub fn spec(&self) -> &RouteSpec {
        &self.spec
    }

    /// The name clients send.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Picks the next target by weight; `None` when every weight is 0.
    fn pick(&self) -> Option<usize> {
        let mut credit = self.credit.lock().unwrap_or_else(|p| p.into_inner());
        let total: i64 = self.spec.targets.iter().map(|t| i64::from(t.weight)).sum();
        if total == 0 {
            return None;
        }
        for (credit, target) in credit.iter_mut().zip(&self.spec.targets) {
            *credit += i64::from(target.weight);
        }
        // The first of the largest credits, so equal weights go in declared order.
        let (best, _) = credit.iter().enumerate().rev().max_by_key(|(_, c)| **c)?;
        credit[best] -= total;
        Some(best)
    }

    /// The names this request tries, in order: the target picked by weight, then the other
    /// targets as declared, then the fallbacks. Names may be routes (see [`expand`]).
    pub fn order(&self) -> Vec<&str> {
        let picked = self.pick();
        let targets = self.spec.targets.iter().map(|t| t.model.as_str());
        picked
            .map(|i| self.spec.targets[i].model.as_str())
            .into_iter()
            .chain(
                targets
                    .enumerate()
                    .filter(|(i, _)| Some(*i) != picked)
                    .map(|(_, m)| m),
            )
            .chain(self.spec.fallback.iter().map(String::as_str))
            .collect()
    }
}

/// The models a request for `name` tries, in order: a route's [`Route::order`] with every
/// route in it replaced by its own order, each model once. `route` finds a route by name;
/// a name that is not a route is a model. Loops are refused when routes are loaded; one that
/// slipped through (routes from different sources) ends at the names already seen.
pub fn expand<'a>(name: &str, route: &dyn Fn(&str) -> Option<&'a Route>) -> Vec<String> {
    let mut models = Vec::new();
    let mut seen_routes = vec![name.to_string()];
    if let Some(start) = route(name) {
        push_order(start, route, &mut models, &mut seen_routes);
    } else {
        models.push(name.to_string());
    }
    models
}

fn push_order<'a>(
    from: &Route,
    route: &dyn Fn(&str) -> Option<&'a Route>,
    models: &mut Vec<String>,
    seen_routes: &mut Vec<String>,
) {
    for name in from.order() {
        match route(name) {
            Some(inner) if !seen_routes.iter().any(|s| s == name) => {
                seen_routes.push(name.to_string());
                push_order(inner, route, models, seen_routes);
            }
            Some(_) => {}
            None if !models.iter().any(|m| m == name) => models.push(name.to_string()),
            None => {}
        }
    }
}
