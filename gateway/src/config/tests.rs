//! Parsing of the `kubernetes:` and `routes:` sections: what loads, and refusals at their line.

use super::{Config, ConfigError};

const MODEL: &str = "models:\n  - name: m\n    discovery: kubernetes\n";

fn parse(kubernetes: &str) -> Result<Config, ConfigError> {
    Config::from_yaml(&format!("{MODEL}kubernetes: {kubernetes}\n"))
}

fn watched(kubernetes: &str) -> Vec<String> {
    let config = parse(kubernetes).unwrap_or_else(|e| panic!("{kubernetes}: {e}"));
    config
        .kubernetes
        .map(|k| k.watched_namespaces())
        .unwrap_or_default()
}

#[test]
fn namespaces_list_is_watched_sorted_without_repeats() {
    assert_eq!(watched("{namespaces: [b, a, b]}"), ["a", "b"]);
}

#[test]
fn single_namespace_spelling_still_works_and_merges_with_the_list() {
    assert_eq!(watched("{namespace: ml}"), ["ml"]);
    assert_eq!(
        watched("{namespace: ml, namespaces: [ml, other]}"),
        ["ml", "other"]
    );
}

#[test]
fn empty_or_absent_namespaces_mean_all() {
    assert!(watched("{}").is_empty());
    assert!(watched("{namespaces: [], port_name: web}").is_empty());
    assert!(watched("{namespace: null}").is_empty());
}

#[test]
fn unknown_field_is_refused_with_its_line() {
    let error = parse("{namespacez: [a]}").err().map(|e| e.to_string());
    let message = error.unwrap_or_default();
    assert!(message.contains("namespacez"), "{message}");
    assert!(message.contains("line 4"), "{message}");
}

#[test]
fn invalid_namespace_name_is_refused_with_its_line_and_reason() {
    let text = format!("{MODEL}kubernetes:\n  namespaces:\n    - good\n    - Bad_Name\n");
    match Config::from_yaml(&text) {
        Err(ConfigError::Invalid { line, reason, .. }) => {
            assert_eq!(line, 7);
            assert!(reason.contains("Bad_Name"), "{reason}");
        }
        other => panic!("expected an invalid-value error, got {other:?}"),
    }
    assert!(parse("{namespace: ''}").is_err());
}

const ROUTED: &str = "models:\n  - name: llama-3-8b\n  - name: qwen3-8b\n  - name: smollm2-135m\n";

#[test]
fn a_route_with_weights_and_fallbacks_loads_in_order() {
    let text = format!(
        "{ROUTED}routes:\n  - name: chat\n    targets: [{{model: llama-3-8b, weight: 3}}, {{model: qwen3-8b}}]\n    fallback: [smollm2-135m]\n"
    );
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e}"));
    let spec = &config.route_specs()[0];
    assert_eq!(spec.name, "chat");
    let weights: Vec<(&str, u32)> = spec
        .targets
        .iter()
        .map(|t| (t.model.as_str(), t.weight))
        .collect();
    assert_eq!(weights, [("llama-3-8b", 3), ("qwen3-8b", 1)]);
    assert_eq!(spec.fallback, ["smollm2-135m"]);
}

#[test]
fn a_missing_target_or_a_loop_is_refused_at_its_line() {
    let missing = format!("{ROUTED}routes:\n  - name: chat\n    targets: [{{model: gpt-5}}]\n");
    match Config::from_yaml(&missing) {
        Err(ConfigError::Invalid { line, reason, .. }) => {
            assert_eq!(line, 6);
            assert_eq!(
                reason,
                "route `chat`: `gpt-5` is neither a served model nor a route"
            );
        }
        other => panic!("expected an invalid-value error, got {other:?}"),
    }
    let looped = format!(
        "{ROUTED}routes:\n  - name: a\n    targets: [{{model: b}}]\n  - name: b\n    targets: [{{model: llama-3-8b}}]\n    fallback: [a]\n"
    );
    let reason = Config::from_yaml(&looped)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(reason.contains("it loops: a -> b -> a"), "{reason}");
    let shadow =
        format!("{ROUTED}routes:\n  - name: qwen3-8b\n    targets: [{{model: llama-3-8b}}]\n");
    let reason = Config::from_yaml(&shadow)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        reason.contains("a model is served under this name"),
        "{reason}"
    );
}
