//! Fuzz target: the gateway's partial parse of a client's body and its rewrites (asking the
//! engine for usage on a stream; naming a route's model). None may panic on any bytes; on
//! every body it accepts, the prompt summary must not panic (prefix hashing cuts text at
//! character boundaries), and the rewritten body must be JSON equal to the client's with
//! `stream_options.include_usage = true` (or `model` renamed) and nothing else changed — or,
//! when the client's `stream_options` is neither an object nor null, the client's bytes
//! untouched.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

/// The one item the two files need from the gateway's error module.
mod error {
    #[derive(Debug)]
    pub struct GatewayError;
    impl GatewayError {
        pub fn bad_request(_message: impl Into<String>, _param: Option<&'static str>) -> Self {
            Self
        }
    }
}

// Only `top_level_members` is used here.
#[allow(dead_code)]
#[path = "../../gateway/src/json_members.rs"]
mod json_members;
// Fields the gateway reads elsewhere (priority, n) are unread here.
#[allow(dead_code)]
#[path = "../../gateway/src/request/parse.rs"]
mod parse;
#[path = "../../gateway/src/request/rewrite.rs"]
mod rewrite;

use bytes::Bytes;
use serde_json::{Map, Value};

/// The property, for any input.
fn check(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    let Ok(parsed) = parse::parse_body(&body) else {
        return;
    };
    for prefix_chars in [0, 1, 7, 256] {
        let _ = parsed.summarize_prompt(prefix_chars);
    }
    let _ = parsed.max_output_tokens();
    check_model_rename(&body);
    let out = rewrite::request_usage_in_stream(&body, parsed.stream_options);
    // The property is stated for the bodies serde_json reads as one object (the partial parse
    // also accepts, e.g., duplicate unknown members, where "equal" has no single meaning).
    let Ok(Value::Object(mut expected)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let options = match expected.get("stream_options") {
        None | Some(Value::Null) => Some(Map::new()),
        Some(Value::Object(map)) => Some(map.clone()),
        Some(_) => None,
    };
    let Some(mut options) = options else {
        assert_eq!(out, body, "a non-object stream_options must be left alone");
        return;
    };
    options.insert("include_usage".into(), Value::Bool(true));
    expected.insert("stream_options".into(), Value::Object(options));
    let got: Value = serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "rewrite broke the JSON ({e}): {}",
            String::from_utf8_lossy(&out)
        )
    });
    assert_eq!(got, Value::Object(expected));
}

/// A route's request renamed to its model is the client's object with `model` replaced.
fn check_model_rename(body: &Bytes) {
    let Ok(Value::Object(mut expected)) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let out = rewrite::with_model(body, "route-target \"7\"");
    expected.insert("model".into(), Value::from("route-target \"7\""));
    let got: Value = serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "the model rename broke the JSON ({e}): {}",
            String::from_utf8_lossy(&out)
        )
    });
    assert_eq!(got, Value::Object(expected));
}

fuzz_main!("gateway_request");
