//! Mistral calls: `[TOOL_CALLS]` then a JSON list of `{"name": …, "arguments": {…}}` (v3
//! tokenizers), or `[TOOL_CALLS]name[ARGS]{…}` per call (v11+). Text before is content.

use super::json_scan::Scan;
use super::parser::{Parsed, PartialCall, call_at, partial_marker_len, skip_ws};

pub const TOOL_CALLS: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";

/// See [`super::ToolParser::parse`].
pub fn parse(text: &str, done: bool) -> Parsed {
    let Some(first) = text.find(TOOL_CALLS) else {
        let held = if done {
            0
        } else {
            partial_marker_len(text, TOOL_CALLS)
        };
        return Parsed {
            content_end: text.len() - held,
            calls: Vec::new(),
        };
    };
    let at = skip_ws(text, first + TOOL_CALLS.len());
    let calls = if text[at..].starts_with('[') {
        list(text, at + 1)
    } else {
        named(text, first)
    };
    Parsed {
        content_end: first,
        calls,
    }
}

/// `[{…}, {…}]` from just after the `[`.
fn list(text: &str, mut at: usize) -> Vec<PartialCall> {
    let mut calls = Vec::new();
    loop {
        at = skip_ws(text, at);
        if !text[at..].starts_with('{') {
            return calls;
        }
        let (call, scan) = call_at(text, at, &["arguments", "parameters"]);
        calls.push(call);
        let Scan::Complete(end) = scan else {
            return calls;
        };
        at = skip_ws(text, end);
        match text[at..].strip_prefix(',') {
            Some(_) => at += 1,
            None => return calls,
        }
    }
}

/// `[TOOL_CALLS]name[ARGS]{…}` repeated, from the first marker.
fn named(text: &str, mut at: usize) -> Vec<PartialCall> {
    let mut calls = Vec::new();
    while let Some(rest) = text[at..].strip_prefix(TOOL_CALLS) {
        let start = text.len() - rest.len();
        let Some(args_at) = rest.find(ARGS) else {
            return calls;
        };
        let name = rest[..args_at].trim().to_string();
        let value_at = skip_ws(text, start + args_at + ARGS.len());
        let scan = super::json_scan::scan_value(text.as_bytes(), value_at);
        let end = match scan {
            Scan::Complete(end) => end,
            _ => text.len(),
        };
        calls.push(PartialCall {
            name: Some(name),
            arguments: text[value_at..end].to_string(),
            complete: matches!(scan, Scan::Complete(_)),
        });
        if !matches!(scan, Scan::Complete(_)) {
            return calls;
        }
        at = skip_ws(text, end);
    }
    calls
}

/// Instructions in Mistral's own terms.
pub fn instructions(tools_json: &[String]) -> String {
    format!(
        "You can call these functions:\n[{}]\n\nTo call functions, answer with {TOOL_CALLS} \
         followed by a JSON list of calls: [{{\"name\": <function-name>, \"arguments\": \
         <args-json-object>}}]",
        tools_json.join(", ")
    )
}
