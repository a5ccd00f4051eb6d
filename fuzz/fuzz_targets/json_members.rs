//! Fuzz target: the gateway's top-level member scan (used to read `usage` out of responses)
//! must never panic, and on every object serde_json accepts it must find exactly the values
//! serde_json finds (or decline, for escaped keys, so the caller parses the whole body).
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

#[path = "../../gateway/src/json_members.rs"]
mod json_members;

use serde_json::Value;

const KEYS: [&[u8]; 3] = [b"usage", b"choices", b"id"];

/// The property, for any input.
fn check(data: &[u8]) {
    let scanned = json_members::top_level_values(data, KEYS);
    if let Some(found) = scanned {
        for at in found.into_iter().flatten() {
            let _ = json_members::is_non_empty_array(&data[at..]);
        }
    }
    let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Some(found) = scanned else {
        // Declining is only allowed for a top-level key written with escapes.
        assert!(data.contains(&b'\\'), "declined an object without escapes");
        return;
    };
    // Each member found spans exactly its value, and cutting it out leaves the rest.
    if let Some(members) = json_members::top_level_members(data, KEYS) {
        for (key, member) in KEYS.iter().zip(members) {
            let Some(member) = member else { continue };
            let key = std::str::from_utf8(key).expect("ascii keys");
            let value: Value = serde_json::from_slice(&data[member.value..member.end])
                .expect("the span is the value");
            assert_eq!(Some(&value), object.get(key), "{key}");
            let quoted = format!("\"{key}\"");
            let duplicates = data
                .windows(quoted.len())
                .filter(|w| *w == quoted.as_bytes())
                .count();
            if duplicates == 1 {
                let cut: Value =
                    serde_json::from_slice(&json_members::without_member(data, member))
                        .expect("still JSON without the member");
                let mut rest = object.clone();
                rest.remove(key);
                assert_eq!(cut, Value::Object(rest), "{key}");
            }
        }
    }
    for (key, at) in KEYS.iter().zip(found) {
        let key = std::str::from_utf8(key).expect("ascii keys");
        match (object.get(key), at) {
            (None, None) => {}
            (Some(expected), Some(at)) => {
                let mut value = serde_json::Deserializer::from_slice(&data[at..]);
                let got = <Value as serde::Deserialize>::deserialize(&mut value).expect("a value");
                assert_eq!(&got, expected, "{key}");
                if let Value::Array(items) = expected {
                    assert_eq!(
                        json_members::is_non_empty_array(&data[at..]),
                        !items.is_empty()
                    );
                }
            }
            (expected, at) => panic!("{key}: serde {expected:?}, scan {at:?}"),
        }
    }
}

fuzz_main!("json_members");
