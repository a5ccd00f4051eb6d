//! Llama 3.1–3.3 JSON calls: the whole message is `{"name": …, "parameters": {…}}` (several
//! joined by `;`), optionally after `<|python_tag|>`. A message that starts otherwise, or whose
//! first key is not a call's, is content.

use super::json_scan::Scan;
use super::parser::{Parsed, PartialCall, call_at, skip_ws};

pub const PYTHON_TAG: &str = "<|python_tag|>";

const CALL_KEYS: [&str; 3] = ["name", "parameters", "arguments"];

/// See [`super::ToolParser::parse`].
pub fn parse(text: &str, done: bool) -> Parsed {
    let content = |calls: Vec<PartialCall>| Parsed {
        content_end: text.len(),
        calls,
    };
    let undecided = Parsed::default();
    let mut at = skip_ws(text, 0);
    if let Some(rest) = text[at..].strip_prefix(PYTHON_TAG) {
        at = skip_ws(text, text.len() - rest.len());
    } else if !done && at < text.len() && PYTHON_TAG.starts_with(&text[at..]) {
        return undecided;
    }
    if at == text.len() {
        return if done { content(Vec::new()) } else { undecided };
    }
    if !text[at..].starts_with('{') {
        return content(Vec::new());
    }
    // Decided by the first key: a call's, or any other JSON the user asked for.
    let (_, first_key) = first_key(text, at);
    match first_key {
        None if done => return content(Vec::new()),
        None => return undecided,
        Some(key) if !CALL_KEYS.contains(&key.as_str()) => return content(Vec::new()),
        Some(_) => {}
    }
    let mut calls = Vec::new();
    loop {
        let (call, scan) = call_at(text, at, &["parameters", "arguments"]);
        calls.push(call);
        let Scan::Complete(end) = scan else { break };
        at = skip_ws(text, end);
        match text[at..].strip_prefix(';') {
            Some(_) => at = skip_ws(text, at + 1),
            None => break,
        }
        if !text[at..].starts_with('{') {
            break;
        }
    }
    Parsed {
        content_end: 0,
        calls,
    }
}

fn first_key(text: &str, at: usize) -> (Scan, Option<String>) {
    let scan = super::json_scan::scan_object(text.as_bytes(), at);
    let key = scan.members.first().map(|m| m.key.clone());
    (scan.scan, key)
}

/// Meta's wording for JSON-based tool calling.
pub fn instructions(tools_json: &[String]) -> String {
    format!(
        "Given the following functions, please respond with a JSON for a function call with its \
         proper arguments that best answers the given prompt.\n\nRespond in the format \
         {{\"name\": function name, \"parameters\": dictionary of argument name and its value}}. \
         Do not use variables.\n\n{}",
        tools_json.join("\n\n")
    )
}
