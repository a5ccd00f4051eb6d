//! Finds where a JSON object's top-level members start without parsing their values.
//!
//! The gateway reads `usage` from every non-streaming response; deserialising the whole body
//! to get at it walked every token of every choice. One pass over the bytes that follows only
//! strings and nesting finds the member, and serde then parses just that value.
//!
//! Self-contained (no crate imports), so the fuzz target compiles it from this file.

/// For each of `keys`, the offset of its value's first byte in the top-level object `json`
/// (the last occurrence wins, as in `serde_json::Value`). `None` when `json` is not one
/// complete object, or when a top-level key uses escapes (the caller falls back to a full
/// parse, which unescapes). Values are not validated: the caller parses the ones it uses.
pub fn top_level_values<const N: usize>(
    json: &[u8],
    keys: [&[u8]; N],
) -> Option<[Option<usize>; N]> {
    let mut found = [None; N];
    let mut at = skip_whitespace(json, 0);
    if json.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    let mut depth = 1usize;
    while let Some(&byte) = json.get(at) {
        match byte {
            b'"' => {
                let start = at + 1;
                let end = string_end(json, start)?;
                at = end + 1;
                if depth == 1 {
                    let colon = skip_whitespace(json, at);
                    if json.get(colon) == Some(&b':') {
                        let key = &json[start..end];
                        if key.contains(&b'\\') {
                            return None;
                        }
                        if let Some(index) = keys.iter().position(|k| *k == key) {
                            found[index] = Some(skip_whitespace(json, colon + 1));
                        }
                        at = colon + 1;
                    }
                }
            }
            b'{' | b'[' => {
                depth += 1;
                at += 1;
            }
            b'}' | b']' => {
                depth -= 1;
                at += 1;
                if depth == 0 {
                    return Some(found);
                }
            }
            _ => at += 1,
        }
    }
    None
}

/// Whether the value starting at `json[0]` is an array with at least one element.
pub fn is_non_empty_array(json: &[u8]) -> bool {
    json.first() == Some(&b'[') && !matches!(json.get(skip_whitespace(json, 1)), Some(b']') | None)
}

/// The index of the quote closing the string whose contents start at `at`.
fn string_end(json: &[u8], mut at: usize) -> Option<usize> {
    while let Some(&byte) = json.get(at) {
        match byte {
            b'\\' => at += 2,
            b'"' => return Some(at),
            _ => at += 1,
        }
    }
    None
}

fn skip_whitespace(json: &[u8], mut at: usize) -> usize {
    while matches!(json.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_at<'a>(json: &'a str, key: &str) -> Option<&'a str> {
        let [at] = top_level_values(json.as_bytes(), [key.as_bytes()]).expect("an object");
        Some(&json[at?..])
    }

    #[test]
    fn finds_top_level_members_only() {
        let json = r#"{"id":"x","choices":[{"text":"\"usage\": no","usage":1}],
            "usage" : {"prompt_tokens":3}}"#;
        assert_eq!(value_at(json, "usage"), Some(r#"{"prompt_tokens":3}}"#));
        assert!(value_at(json, "choices").is_some_and(|v| v.starts_with("[{")));
        assert_eq!(value_at(json, "text"), None);
        assert_eq!(
            value_at(r#"{"a":"b","usage":null}"#, "usage"),
            Some("null}")
        );
        // The last of duplicate keys wins, as in serde_json::Value.
        assert_eq!(value_at(r#"{"k":1,"k":2}"#, "k"), Some("2}"));
    }

    #[test]
    fn incomplete_or_non_objects_and_escaped_keys_are_none() {
        for bad in [
            "",
            "[1]",
            r#"{"usage":{"a":1}"#,
            r#"{"usage":"unterminated}"#,
            r#"{"us\u0061ge":{}}"#,
            "  ",
        ] {
            assert_eq!(top_level_values(bad.as_bytes(), [b"usage"]), None, "{bad}");
        }
        assert_eq!(top_level_values(b" {} ", [b"usage"]), Some([None]));
    }

    #[test]
    fn non_empty_arrays() {
        assert!(is_non_empty_array(b"[{}]"));
        assert!(is_non_empty_array(b"[ 0 ]"));
        assert!(!is_non_empty_array(b"[ ]"));
        assert!(!is_non_empty_array(b"null"));
        assert!(!is_non_empty_array(b"["));
    }
}
