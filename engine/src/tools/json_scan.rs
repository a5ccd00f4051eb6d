//! A scanner for JSON that may still be arriving: where each top-level member of an object
//! starts and ends, whether the object closed, and whether what is there is already invalid.
//! Tool-call parsers use it to stream a call's arguments while the model writes them: the raw
//! text of an unfinished value is always a prefix of its final text.

/// How far a value (or object) got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Complete; the index just past its end.
    Complete(usize),
    /// The text ended inside it.
    Partial,
    /// Not JSON.
    Invalid,
}

/// One member of an object: its key and the span of its raw value (`value.1` is the text's
/// end while the value is partial, or where it turned out not to be JSON: the span then runs
/// to the text's end, so it only ever grows as text arrives).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub key: String,
    pub value: (usize, usize),
    pub complete: bool,
}

/// An object read so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectScan {
    pub members: Vec<Member>,
    /// The object's own state.
    pub scan: Scan,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Scans the string whose opening quote is at `i`.
fn scan_string(b: &[u8], i: usize) -> Scan {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Scan::Complete(j + 1),
            c if c < 0x20 => return Scan::Invalid,
            _ => j += 1,
        }
    }
    Scan::Partial
}

/// Scans the value starting at (or after whitespace from) `i`.
pub fn scan_value(b: &[u8], i: usize) -> Scan {
    let i = skip_ws(b, i);
    match b.get(i) {
        None => Scan::Partial,
        Some(b'"') => scan_string(b, i),
        Some(b'{') => scan_object(b, i).scan,
        Some(b'[') => scan_array(b, i),
        Some(c) if c.is_ascii_alphanumeric() || *c == b'-' => {
            let mut j = i;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b"+-.".contains(&b[j])) {
                j += 1;
            }
            if j == b.len() {
                Scan::Partial
            } else {
                Scan::Complete(j)
            }
        }
        Some(_) => Scan::Invalid,
    }
}

fn scan_array(b: &[u8], i: usize) -> Scan {
    let mut j = skip_ws(b, i + 1);
    if b.get(j) == Some(&b']') {
        return Scan::Complete(j + 1);
    }
    loop {
        match scan_value(b, j) {
            Scan::Complete(end) => j = skip_ws(b, end),
            other => return other,
        }
        match b.get(j) {
            None => return Scan::Partial,
            Some(b',') => j += 1,
            Some(b']') => return Scan::Complete(j + 1),
            Some(_) => return Scan::Invalid,
        }
    }
}

/// Scans the object whose `{` is at `i`, recording its members.
pub fn scan_object(b: &[u8], i: usize) -> ObjectScan {
    let mut members = Vec::new();
    let done = |members, scan| ObjectScan { members, scan };
    if b.get(i) != Some(&b'{') {
        return done(members, Scan::Invalid);
    }
    let mut j = skip_ws(b, i + 1);
    if b.get(j) == Some(&b'}') {
        return done(members, Scan::Complete(j + 1));
    }
    loop {
        match b.get(j) {
            None => return done(members, Scan::Partial),
            Some(b'"') => {}
            Some(_) => return done(members, Scan::Invalid),
        }
        let key_end = match scan_string(b, j) {
            Scan::Complete(end) => end,
            other => return done(members, other),
        };
        let key = serde_json::from_slice::<String>(&b[j..key_end]).unwrap_or_default();
        j = skip_ws(b, key_end);
        match b.get(j) {
            None => return done(members, Scan::Partial),
            Some(b':') => j = skip_ws(b, j + 1),
            Some(_) => return done(members, Scan::Invalid),
        }
        if j == b.len() {
            return done(members, Scan::Partial);
        }
        match scan_value(b, j) {
            Scan::Complete(end) => {
                members.push(Member {
                    key,
                    value: (j, end),
                    complete: true,
                });
                j = skip_ws(b, end);
            }
            scan @ (Scan::Partial | Scan::Invalid) => {
                members.push(Member {
                    key,
                    value: (j, b.len()),
                    complete: false,
                });
                return done(members, scan);
            }
        }
        match b.get(j) {
            None => return done(members, Scan::Partial),
            Some(b',') => j = skip_ws(b, j + 1),
            Some(b'}') => return done(members, Scan::Complete(j + 1)),
            Some(_) => return done(members, Scan::Invalid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_of_a_growing_object_keep_stable_prefixes() {
        let full = r#"{"name": "f", "arguments": {"a": [1, "x}"], "b": {}}}"#;
        let mut last_args = String::new();
        for end in 1..=full.len() {
            let text = &full[..end];
            let scan = scan_object(text.as_bytes(), 0);
            assert_ne!(scan.scan, Scan::Invalid, "{text}");
            if let Some(m) = scan.members.iter().find(|m| m.key == "arguments") {
                let args = &text[m.value.0..m.value.1];
                assert!(args.starts_with(&last_args), "{args} after {last_args}");
                last_args = args.to_string();
            }
        }
        assert_eq!(last_args, r#"{"a": [1, "x}"], "b": {}}"#);
        assert_eq!(
            scan_object(full.as_bytes(), 0).scan,
            Scan::Complete(full.len())
        );
    }

    #[test]
    fn broken_json_is_invalid_not_partial() {
        for bad in [
            r#"{"a" 1}"#,
            r#"{a: 1}"#,
            r#"{"a": 1 "b"}"#,
            r#"{"a": [1 2]}"#,
        ] {
            assert_eq!(scan_object(bad.as_bytes(), 0).scan, Scan::Invalid, "{bad}");
        }
        assert_eq!(scan_object(br#"{"a": "b"#, 0).scan, Scan::Partial);
    }
}
