//! The body rewrites the gateway makes: asking the engine for usage on a stream, and naming
//! a route's model.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::value::RawValue;

/// Returns the body with `stream_options.include_usage` set to true, changing nothing else:
/// the field is inserted after the opening brace, or only the `stream_options` value is
/// re-written in place when the client sent one (an object, or `null`). Any other value is
/// the client's error to hear about from the engine, as it would directly: left as it is.
pub fn request_usage_in_stream(body: &Bytes, stream_options: Option<&RawValue>) -> Bytes {
    const FIELD: &[u8] = br#""stream_options":{"include_usage":true}"#;
    let Some(raw) = stream_options else {
        let Some(brace) = body.iter().position(|&b| b == b'{') else {
            return body.clone();
        };
        let rest = &body[brace + 1..];
        // A comma after the new member unless the object was empty (found by fuzzing; a
        // stream request always has `stream`, but the function should not rely on it).
        let empty = rest.trim_ascii_start().starts_with(b"}");
        let mut out = Vec::with_capacity(body.len() + FIELD.len() + 1);
        out.extend_from_slice(&body[..=brace]);
        out.extend_from_slice(FIELD);
        if !empty {
            out.push(b',');
        }
        out.extend_from_slice(rest);
        return Bytes::from(out);
    };
    // The raw value borrows from `body`: its address gives its span.
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    let end = start + raw.get().len();
    // Duplicate members collapse to the last, as in any JSON reader downstream.
    let members = match raw.get() {
        "null" => BTreeMap::new(),
        text => match serde_json::from_str::<BTreeMap<String, &RawValue>>(text) {
            Ok(members) => members,
            Err(_) => return body.clone(),
        },
    };
    // The client's other members keep their values byte for byte (a round trip through
    // `serde_json::Value` re-printed numbers: fuzzing found 8.888888888888889e86 come back
    // as 8.88888888888889e86).
    let mut replacement = String::from("{");
    for (key, value) in members.iter().filter(|(key, _)| *key != "include_usage") {
        replacement.push_str(&serde_json::Value::from(key.as_str()).to_string());
        replacement.push(':');
        replacement.push_str(value.get());
        replacement.push(',');
    }
    replacement.push_str(r#""include_usage":true}"#);
    let mut out = Vec::with_capacity(body.len() + replacement.len());
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(replacement.as_bytes());
    out.extend_from_slice(&body[end..]);
    Bytes::from(out)
}

/// Returns the body with its top-level `model` member naming `model`, changing nothing else
/// (a route's request goes to a model under that model's own name: engines refuse a name
/// they do not serve). A body whose keys use escapes goes through a full parse instead.
pub fn with_model(body: &Bytes, model: &str) -> Bytes {
    let name = serde_json::Value::from(model).to_string();
    if let Some([Some(member)]) = crate::json_members::top_level_members(body, [b"model"]) {
        let mut out = Vec::with_capacity(body.len() + name.len());
        out.extend_from_slice(&body[..member.value]);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&body[member.end..]);
        return Bytes::from(out);
    }
    // Keys written with escapes: re-written member by member, each value byte for byte (a
    // round trip through `serde_json::Value` would re-print numbers; see below).
    let Ok(mut members) = serde_json::from_slice::<BTreeMap<String, &RawValue>>(body) else {
        return body.clone();
    };
    let Ok(name) = RawValue::from_string(name) else {
        return body.clone();
    };
    members.insert("model".into(), &name);
    serde_json::to_vec(&members).map_or_else(|_| body.clone(), Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::parse_body;

    fn rewrite(body: &str) -> serde_json::Value {
        let bytes = Bytes::copy_from_slice(body.as_bytes());
        let parsed = parse_body(&bytes).expect("parses");
        let out = request_usage_in_stream(&bytes, parsed.stream_options);
        serde_json::from_slice(&out).expect("still JSON")
    }

    #[test]
    fn names_the_model_and_keeps_every_other_byte() {
        let body =
            Bytes::from_static(br#"{"temperature":8.888888888888889e86, "model" : "chat","n":1}"#);
        let out = with_model(&body, "llama-3-8b");
        assert_eq!(
            &out[..],
            br#"{"temperature":8.888888888888889e86, "model" : "llama-3-8b","n":1}"#
        );
        let escaped = Bytes::from_static(br#"{"mo\u0064el":"chat","x":1}"#);
        let out: serde_json::Value =
            serde_json::from_slice(&with_model(&escaped, "m")).expect("JSON");
        assert_eq!(out["model"], "m");
        assert_eq!(out["x"], 1);
    }

    #[test]
    fn inserts_or_edits_stream_options_and_keeps_the_rest() {
        let v = rewrite(r#" {"model":"m","stream":true,"prompt":"x"}"#);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["prompt"], "x");
        let v = rewrite(
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":false,"x":1},"n":2}"#,
        );
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["stream_options"]["x"], 1);
        assert_eq!(v["n"], 2);
    }

    #[test]
    fn the_clients_other_options_keep_their_bytes() {
        let body = r#"{"stream":true,"stream_options":{"x":8.888888888888889e86,"include_usage":false,"y":[1, 2]}}"#;
        let bytes = Bytes::copy_from_slice(body.as_bytes());
        let out =
            request_usage_in_stream(&bytes, parse_body(&bytes).expect("parses").stream_options);
        assert_eq!(
            std::str::from_utf8(&out).expect("utf-8"),
            r#"{"stream":true,"stream_options":{"x":8.888888888888889e86,"y":[1, 2],"include_usage":true}}"#
        );
    }

    #[test]
    fn an_empty_object_gets_no_trailing_comma() {
        assert_eq!(rewrite(" { } ")["stream_options"]["include_usage"], true);
    }

    #[test]
    fn an_explicit_null_is_replaced_not_duplicated() {
        let body = r#"{"model":"m","stream":true,"stream_options":null,"prompt":"x"}"#;
        let bytes = Bytes::copy_from_slice(body.as_bytes());
        let out =
            request_usage_in_stream(&bytes, parse_body(&bytes).expect("parses").stream_options);
        assert_eq!(
            std::str::from_utf8(&out).expect("utf-8"),
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"prompt":"x"}"#
        );
    }

    #[test]
    fn a_stream_options_that_is_not_an_object_is_left_for_the_engine_to_refuse() {
        let body = r#"{"model":"m","stream":true,"stream_options":"yes","prompt":"x"}"#;
        let bytes = Bytes::copy_from_slice(body.as_bytes());
        let out =
            request_usage_in_stream(&bytes, parse_body(&bytes).expect("parses").stream_options);
        assert_eq!(out, bytes);
    }
}
