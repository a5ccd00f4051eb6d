//! Hermes-style calls (NousResearch Hermes 2/3, Qwen2/2.5/3, SmolLM): each call is a JSON
//! object `{"name": …, "arguments": {…}}` between `<tool_call>` and `</tool_call>`; text
//! before the first call is content.

use super::json_scan::Scan;
use super::parser::{Parsed, call_at, partial_marker_len, skip_ws};

pub const START: &str = "<tool_call>";
pub const END: &str = "</tool_call>";

/// See [`super::ToolParser::parse`].
pub fn parse(text: &str, done: bool) -> Parsed {
    let Some(first) = text.find(START) else {
        let held = if done {
            0
        } else {
            partial_marker_len(text, START)
        };
        return Parsed {
            content_end: text.len() - held,
            calls: Vec::new(),
        };
    };
    let mut calls = Vec::new();
    let mut at = first + START.len();
    loop {
        at = skip_ws(text, at);
        if !text[at..].starts_with('{') {
            break;
        }
        let (call, scan) = call_at(text, at, &["arguments", "parameters"]);
        calls.push(call);
        let Scan::Complete(end) = scan else { break };
        at = skip_ws(text, end);
        match text[at..].strip_prefix(END) {
            Some(_) => at = skip_ws(text, at + END.len()),
            None => break,
        }
        match text[at..].strip_prefix(START) {
            Some(_) => at += START.len(),
            None => break,
        }
    }
    Parsed {
        content_end: first,
        calls,
    }
}

/// Qwen2.5's wording, which Hermes-trained models know.
pub fn instructions(tools_json: &[String]) -> String {
    format!(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{}\n</tools>\n\n\
         For each function call, return a json object with function name and arguments within \
         <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>",
        tools_json.join("\n")
    )
}
