//! A route as declared (the gateway's `routes:`, or a `ModelRoute` object), and the checks
//! on a set of routes before any is used: what cannot work is refused with its reason, at
//! load (the static file) or when discovered.

use std::collections::{HashMap, HashSet};

/// A route as declared (the gateway's `routes:`, or a `ModelRoute` object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    /// The name clients send as `model`.
    pub name: String,
    /// Models (or other routes) the traffic spreads over, each with its weight.
    pub targets: Vec<RouteTarget>,
    /// Tried in order after the targets.
    pub fallback: Vec<String>,
}

/// One weighted target of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTarget {
    /// A model's served name, or another route's name.
    pub model: String,
    /// Its share of the route's requests, relative to the others (0: fallback only).
    pub weight: u32,
}

/// A route that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route `{route}`: {reason}")]
pub struct RouteError {
    /// The route's name.
    pub route: String,
    /// Its index in the list checked.
    pub index: usize,
    /// Why it is refused.
    pub reason: String,
}

/// What is known of the served models when routes are checked.
#[derive(Clone, Copy)]
pub struct KnownModels<'a> {
    /// Whether a name is served as a model now.
    pub is_model: &'a dyn Fn(&str) -> bool,
    /// Whether those are all the models there will be (a static file); `false` when models
    /// are discovered later, so a target not served yet is accepted (and skipped at request
    /// time while it is not).
    pub complete: bool,
}

/// Checks `routes` together: names unique and not a model's, at least one weighted target,
/// no name twice in a route, every target and fallback a known model or route (when the
/// models are `complete`), and no loop through routes.
pub fn check_routes(routes: &[RouteSpec], models: KnownModels<'_>) -> Result<(), RouteError> {
    let by_name: HashMap<&str, usize> = routes
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect();
    for (index, route) in routes.iter().enumerate() {
        let refuse = |reason: String| RouteError {
            route: route.name.clone(),
            index,
            reason,
        };
        one_route(route, &by_name, index, models).map_err(refuse)?;
    }
    for (index, route) in routes.iter().enumerate() {
        if let Some(path) = find_loop(index, routes, &by_name) {
            return Err(RouteError {
                route: route.name.clone(),
                index,
                reason: format!("it loops: {}", path.join(" -> ")),
            });
        }
    }
    Ok(())
}

/// What one route must be on its own.
fn one_route(
    route: &RouteSpec,
    by_name: &HashMap<&str, usize>,
    index: usize,
    models: KnownModels<'_>,
) -> Result<(), String> {
    if route.name.trim().is_empty() {
        return Err("the name is empty".into());
    }
    if by_name.get(route.name.as_str()) != Some(&index) {
        return Err("the name is declared twice".into());
    }
    if (models.is_model)(&route.name) {
        return Err("a model is served under this name; a route needs a name of its own".into());
    }
    if route.targets.iter().all(|t| t.weight == 0) {
        return Err("it needs at least one target with a weight above 0".into());
    }
    let mut seen = HashSet::new();
    let names = route
        .targets
        .iter()
        .map(|t| &t.model)
        .chain(&route.fallback);
    for name in names {
        if !seen.insert(name.as_str()) {
            return Err(format!(
                "`{name}` is listed twice (targets and fallbacks together)"
            ));
        }
        if name == &route.name {
            return Err(format!("it names itself, so it loops: {name} -> {name}"));
        }
        let known =
            by_name.contains_key(name.as_str()) || !models.complete || (models.is_model)(name);
        if !known {
            return Err(format!("`{name}` is neither a served model nor a route"));
        }
    }
    Ok(())
}

/// A path of route names from `start` back to a route already on the path, if any.
fn find_loop(
    start: usize,
    routes: &[RouteSpec],
    by_name: &HashMap<&str, usize>,
) -> Option<Vec<String>> {
    let mut path = vec![start];
    let mut next = vec![0usize];
    // Depth-first with an explicit stack: `next[d]` is the next name of `path[d]` to follow.
    while let (Some(&at), Some(&child)) = (path.last(), next.last()) {
        let route = &routes[at];
        let names: Vec<&String> = route
            .targets
            .iter()
            .map(|t| &t.model)
            .chain(&route.fallback)
            .collect();
        let Some(name) = names.get(child) else {
            path.pop();
            next.pop();
            continue;
        };
        *next.last_mut()? += 1;
        let Some(&inner) = by_name.get(name.as_str()) else {
            continue;
        };
        if path.contains(&inner) {
            let mut names: Vec<String> = path.iter().map(|&i| routes[i].name.clone()).collect();
            names.push(routes[inner].name.clone());
            return Some(names);
        }
        path.push(inner);
        next.push(0);
    }
    None
}
