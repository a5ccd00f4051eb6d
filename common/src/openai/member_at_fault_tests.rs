//! Tests of naming the member a request body's data error is about.

use super::*;
use crate::openai::{ChatCompletionRequest, CompletionRequest};

/// The member named for `body` parsed as a `T`.
fn culprit<T: serde::de::DeserializeOwned>(body: &str) -> Option<String> {
    let parse = |b: &[u8]| serde_json::from_slice::<T>(b).err();
    let error = parse(body.as_bytes()).expect("a bad body");
    member_at_fault(body.as_bytes(), &error, parse)
}

fn completion_culprit(body: &str) -> Option<String> {
    culprit::<CompletionRequest>(body)
}

fn chat_culprit(body: &str) -> Option<String> {
    culprit::<ChatCompletionRequest>(body)
}

#[test]
fn a_flattened_field_is_named() {
    let body = r#"{"model": "m", "prompt": "hi", "speculative": "yes", "max_tokens": 3}"#;
    assert_eq!(completion_culprit(body).as_deref(), Some("speculative"));
    let body = r#"{"model": "m", "messages": [], "temperature": "hot"}"#;
    assert_eq!(chat_culprit(body).as_deref(), Some("temperature"));
}

#[test]
fn a_top_level_field_is_named() {
    let body = r#"{"model": "m", "prompt": "hi", "stream": "yes"}"#;
    assert_eq!(completion_culprit(body).as_deref(), Some("stream"));
    // A required member of the wrong type: leaving it out only makes it missing.
    let body = r#"{"model": "m", "prompt": {"text": 1}, "max_tokens": 3}"#;
    assert_eq!(completion_culprit(body).as_deref(), Some("prompt"));
}

#[test]
fn a_nested_field_is_named_by_its_path() {
    let body = r#"{"prompt": "hi", "stream": true, "stream_options": {"include_usage": "y"}}"#;
    assert_eq!(
        completion_culprit(body).as_deref(),
        Some("stream_options.include_usage")
    );
    let body = r#"{"model": "m", "messages": [{"role": "user", "content": "a"},
        {"role": 5, "content": "b"}]}"#;
    assert_eq!(chat_culprit(body).as_deref(), Some("messages[1].role"));
}

#[test]
fn the_reason_is_serde_json_without_its_position() {
    let body = r#"{"prompt": "hi", "speculative": "yes"}"#;
    let error = serde_json::from_str::<CompletionRequest>(body).expect_err("bad");
    assert_eq!(
        error_reason(&error),
        "invalid type: string \"yes\", expected a boolean"
    );
}

#[test]
fn what_is_not_a_member_s_fault_names_none() {
    let parse = |b: &[u8]| serde_json::from_slice::<CompletionRequest>(b).err();
    // Malformed JSON, and a body that is not an object.
    for body in [r#"{"prompt": "#, "[1, 2]"] {
        let error = parse(body.as_bytes()).expect("bad");
        assert_eq!(
            member_at_fault(body.as_bytes(), &error, parse),
            None,
            "{body}"
        );
    }
    // A member missing: no member present is at fault.
    let body = r#"{"max_tokens": 3}"#;
    let error = parse(body.as_bytes()).expect("bad");
    assert_eq!(member_at_fault(body.as_bytes(), &error, parse), None);
}
