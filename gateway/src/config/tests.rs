//! Parsing of the `kubernetes:` section: one namespace, several, all, and refusals.

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
