//! Finds where a JSON object's top-level members start without parsing their values.
//!
//! The gateway reads `usage` from every non-streaming response; deserialising the whole body
//! to get at it walked every token of every choice. One pass over the bytes that follows only
//! strings and nesting finds the member, and serde then parses just that value.
//!
//! Self-contained (no crate imports), so the fuzz target compiles it from this file.

/// Where one top-level member lies in its object's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// The key's opening quote.
    pub key: usize,
    /// The value's first byte.
    pub value: usize,
    /// One past the value's last byte.
    pub end: usize,
}

/// For each of `keys`, the offset of its value's first byte in the top-level object `json`
/// (the last occurrence wins, as in `serde_json::Value`). `None` when `json` is not one
/// complete object, or when a top-level key uses escapes (the caller falls back to a full
/// parse, which unescapes). Values are not validated: the caller parses the ones it uses.
pub fn top_level_values<const N: usize>(
    json: &[u8],
    keys: [&[u8]; N],
) -> Option<[Option<usize>; N]> {
    Some(top_level_members(json, keys)?.map(|m| m.map(|m| m.value)))
}

/// Like [`top_level_values`], with each member's whole extent, so that it can be cut out or
/// its value replaced without parsing the rest.
pub fn top_level_members<const N: usize>(
    json: &[u8],
    keys: [&[u8]; N],
) -> Option<[Option<Member>; N]> {
    let mut found = [None; N];
    // The member whose value is being skipped: (index in `keys`, key start, value start).
    let mut open: Option<(usize, usize, usize)> = None;
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
                            open = Some((index, start - 1, skip_whitespace(json, colon + 1)));
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
                if depth == 0 {
                    close(&mut found, &mut open, json, at);
                    return Some(found);
                }
                at += 1;
            }
            b',' if depth == 1 => {
                close(&mut found, &mut open, json, at);
                at += 1;
            }
            _ => at += 1,
        }
    }
    None
}

/// Ends the open member (if any) at the separator `at`: its value ends at the last byte
/// before it that is not whitespace.
fn close<const N: usize>(
    found: &mut [Option<Member>; N],
    open: &mut Option<(usize, usize, usize)>,
    json: &[u8],
    at: usize,
) {
    if let Some((index, key, value)) = open.take() {
        let mut end = at;
        while end > value && matches!(json[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
            end -= 1;
        }
        found[index] = Some(Member { key, value, end });
    }
}

/// `json` without `member`: the member and one comma beside it are cut out, leaving a valid
/// object when `json` was one.
pub fn without_member(json: &[u8], member: Member) -> Vec<u8> {
    // The comma before the key, else the one after the value (a first member).
    let before = json[..member.key]
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    let (cut_from, cut_to) = match before {
        Some(comma) if json[comma] == b',' => (comma, member.end),
        _ => {
            let after = skip_whitespace(json, member.end);
            if json.get(after) == Some(&b',') {
                (member.key, skip_whitespace(json, after + 1))
            } else {
                (member.key, member.end)
            }
        }
    };
    let mut out = Vec::with_capacity(json.len() - (cut_to - cut_from));
    out.extend_from_slice(&json[..cut_from]);
    out.extend_from_slice(&json[cut_to..]);
    out
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
    fn members_span_their_values_and_cut_out_cleanly() {
        let json = br#"{"a":1, "ids" : [1,2] ,"b":{"c":[3]},"z":"x,}"}"#;
        let [ids, b, z, missing] =
            top_level_members(json, [b"ids", b"b", b"z", b"q"]).expect("an object");
        assert_eq!(missing, None);
        let value = |m: Option<Member>| m.map(|m| &json[m.value..m.end]);
        assert_eq!(value(ids), Some(&b"[1,2]"[..]));
        assert_eq!(value(b), Some(&br#"{"c":[3]}"#[..]));
        assert_eq!(value(z), Some(&br#""x,}""#[..]));
        let cut = |json: &[u8], key: &[u8]| {
            let [m] = top_level_members(json, [key]).expect("object");
            String::from_utf8(without_member(json, m.expect("member"))).expect("utf-8")
        };
        assert_eq!(cut(json, b"ids"), r#"{"a":1 ,"b":{"c":[3]},"z":"x,}"}"#);
        assert_eq!(cut(br#"{ "k":1 , "a":2}"#, b"k"), r#"{ "a":2}"#);
        assert_eq!(cut(br#"{"a":2,"k":[]}"#, b"k"), r#"{"a":2}"#);
        assert_eq!(cut(br#"{"k":null}"#, b"k"), "{}");
        for json in [&json[..], br#"{ "k":1 , "a":2}"#, br#"{"a":2,"k":[] }"#] {
            for key in [&b"ids"[..], b"k", b"a"] {
                if let Some([Some(m)]) = top_level_members(json, [key]) {
                    let out = without_member(json, m);
                    let parsed: serde_json::Value = serde_json::from_slice(&out).expect("valid");
                    let mut want: serde_json::Value = serde_json::from_slice(json).expect("valid");
                    want.as_object_mut()
                        .expect("object")
                        .remove(std::str::from_utf8(key).expect("ascii"));
                    assert_eq!(parsed, want);
                }
            }
        }
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
