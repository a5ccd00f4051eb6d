//! The route's order and spread, expansion through routes, and the checks at load.

use std::collections::HashMap;

use super::*;

fn spec(name: &str, targets: &[(&str, u32)], fallback: &[&str]) -> RouteSpec {
    RouteSpec {
        name: name.into(),
        targets: targets
            .iter()
            .map(|(model, weight)| RouteTarget {
                model: (*model).into(),
                weight: *weight,
            })
            .collect(),
        fallback: fallback.iter().map(|f| (*f).into()).collect(),
    }
}

#[test]
fn the_spread_gives_each_target_exactly_its_weight_interleaved() {
    let route = Route::new(spec("chat", &[("a", 3), ("b", 1)], &["c"]));
    let firsts: Vec<String> = (0..8).map(|_| route.order()[0].to_string()).collect();
    // Smooth weighted round robin: a a b a, repeated; never four in a row.
    assert_eq!(firsts, ["a", "a", "b", "a", "a", "a", "b", "a"]);
    let mut counts = HashMap::new();
    for _ in 0..1000 {
        *counts.entry(route.order()[0].to_string()).or_insert(0) += 1;
    }
    assert_eq!(counts["a"], 750);
    assert_eq!(counts["b"], 250);
}

#[test]
fn the_order_is_the_pick_then_the_other_targets_then_the_fallbacks() {
    let route = Route::new(spec("chat", &[("a", 1), ("b", 1), ("c", 0)], &["x", "y"]));
    assert_eq!(route.order(), ["a", "b", "c", "x", "y"]);
    assert_eq!(route.order(), ["b", "a", "c", "x", "y"]);
    // A weight of 0 is never picked first.
    for _ in 0..10 {
        assert_ne!(route.order()[0], "c");
    }
}

#[test]
fn routes_in_a_route_expand_to_their_models_each_once() {
    let outer = Route::new(spec("chat", &[("a", 1)], &["cheap", "a"]));
    let inner = Route::new(spec("cheap", &[("b", 1), ("a", 1)], &[]));
    let routes: HashMap<&str, &Route> = [("chat", &outer), ("cheap", &inner)].into();
    let find = |n: &str| routes.get(n).copied();
    assert_eq!(expand("chat", &find), ["a", "b"]);
    // Not a route: the model itself.
    assert_eq!(expand("a", &find), ["a"]);
    // A loop that slipped past the checks ends where it began.
    let x = Route::new(spec("x", &[("y", 1)], &["m"]));
    let y = Route::new(spec("y", &[("x", 1)], &["n"]));
    let looped: HashMap<&str, &Route> = [("x", &x), ("y", &y)].into();
    assert_eq!(expand("x", &|n: &str| looped.get(n).copied()), ["n", "m"]);
}

fn models(name: &str) -> bool {
    ["a", "b", "c"].contains(&name)
}

fn known(complete: bool) -> KnownModels<'static> {
    KnownModels {
        is_model: &models,
        complete,
    }
}

fn refused(routes: &[RouteSpec], complete: bool) -> String {
    check_routes(routes, known(complete))
        .expect_err("refused")
        .to_string()
}

#[test]
fn what_cannot_work_is_refused_with_its_reason() {
    let good = [
        spec("chat", &[("a", 3), ("b", 1)], &["cheap"]),
        spec("cheap", &[("c", 1)], &[]),
    ];
    assert_eq!(check_routes(&good, known(true)), Ok(()));
    let missing = refused(&[spec("chat", &[("a", 1)], &["nope"])], true);
    assert_eq!(
        missing,
        "route `chat`: `nope` is neither a served model nor a route"
    );
    // With models discovered later, a target not yet served is accepted.
    assert_eq!(
        check_routes(&[spec("chat", &[("nope", 1)], &[])], known(false)),
        Ok(())
    );
    let looped = refused(
        &[spec("x", &[("y", 1)], &[]), spec("y", &[("a", 1)], &["x"])],
        false,
    );
    assert_eq!(looped, "route `x`: it loops: x -> y -> x");
    let own = refused(&[spec("x", &[("a", 1)], &["x"])], false);
    assert_eq!(own, "route `x`: it names itself, so it loops: x -> x");
    // A route named like a model is refused whether or not models are discovered later.
    for complete in [true, false] {
        let shadow = refused(&[spec("a", &[("b", 1)], &[])], complete);
        assert!(
            shadow.contains("a model is served under this name"),
            "{shadow}"
        );
    }
    let twice = refused(&[spec("x", &[("a", 1)], &["a"])], true);
    assert!(twice.contains("`a` is listed twice"), "{twice}");
    let unweighted = refused(&[spec("x", &[("a", 0)], &["b"])], true);
    assert!(unweighted.contains("weight above 0"), "{unweighted}");
    let dup = refused(
        &[spec("x", &[("a", 1)], &[]), spec("x", &[("b", 1)], &[])],
        true,
    );
    assert!(dup.contains("declared twice"), "{dup}");
}

#[test]
fn discovered_routes_that_clash_are_left_out_and_static_ones_stay() {
    use crate::routing::{ModelSettings, Router};
    let router = Router::new(std::sync::Arc::default());
    let settings = || ModelSettings {
        replica_concurrency: 1,
        affinity_prefix_chars: 0,
        scrape_metrics: false,
        stale_after_ms: 1000,
        max_queue: 1,
    };
    for model in ["a", "b"] {
        router.model_or_insert(model, settings);
    }
    router.set_routes(vec![spec("chat", &[("a", 1)], &["b"])]);
    router.set_discovered_routes(vec![
        // Named like a static route, like a model, or looping back: left out.
        spec("chat", &[("b", 1)], &[]),
        spec("a", &[("b", 1)], &[]),
        spec("x", &[("y", 1)], &[]),
        spec("y", &[("x", 1)], &[]),
        spec("cheap", &[("b", 1)], &["chat"]),
    ]);
    assert_eq!(router.route_names(), ["chat", "cheap", "x"]);
    assert_eq!(
        router.route_order("chat"),
        Some(vec!["a".into(), "b".into()])
    );
    assert_eq!(
        router.route_order("cheap"),
        Some(vec!["b".into(), "a".into()])
    );
    // Gone from the cluster: gone from the router; the static route stays.
    router.set_discovered_routes(Vec::new());
    assert_eq!(router.route_names(), ["chat"]);
}
