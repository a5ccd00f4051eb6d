//! The model families' tool-call syntaxes behind one enum: parse what was generated so far,
//! the grammar of a forced call, the instructions and history text for templates that cannot
//! render tools themselves. Family details live in `hermes.rs`, `llama3.rs`, `mistral.rs`.

use serde_json::{Value, json};
use tokenscale_common::openai::ToolCall;

use super::json_scan::{Scan, scan_object};
use super::{ToolError, hermes, llama3, mistral};
use crate::grammar::{JSON_ITEM_SEPARATOR, JSON_KEY_SEPARATOR};

/// A tool-call syntax (vLLM's `--tool-call-parser` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolParser {
    /// `<tool_call>{"name": …, "arguments": …}</tool_call>`: Hermes, Qwen2/2.5/3, SmolLM.
    Hermes,
    /// `{"name": …, "parameters": …}` (several joined by `;`), optionally after
    /// `<|python_tag|>`: Llama 3.1–3.3.
    Llama3Json,
    /// `[TOOL_CALLS][{"name": …, "arguments": …}]`, or `[TOOL_CALLS]name[ARGS]{…}`: Mistral.
    Mistral,
}

/// What has been generated so far, split into content and calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// `text[..content_end]` is content for good (a possible call marker at the end is held
    /// back until it is decided).
    pub content_end: usize,
    pub calls: Vec<PartialCall>,
}

/// A call as far as it was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartialCall {
    /// Known once its string is complete.
    pub name: Option<String>,
    /// The raw arguments text so far (a prefix of its final text).
    pub arguments: String,
    pub complete: bool,
}

impl ToolParser {
    /// Every name `--tool-call-parser` accepts.
    pub const NAMES: [&'static str; 3] = ["hermes", "llama3_json", "mistral"];

    /// The parser called `name`.
    pub fn from_name(name: &str) -> Result<Self, ToolError> {
        match name {
            "hermes" => Ok(Self::Hermes),
            "llama3_json" => Ok(Self::Llama3Json),
            "mistral" => Ok(Self::Mistral),
            other => Err(ToolError::new(
                "--tool-call-parser",
                format!(
                    "unknown parser {other:?}; one of {}",
                    Self::NAMES.join(", ")
                ),
            )),
        }
    }

    /// The family a chat template's own tool syntax shows; Hermes (what SmolLM2 and Qwen
    /// write) when the template shows none.
    pub fn detect(template: &str) -> Self {
        if template.contains("[TOOL_CALLS]") {
            Self::Mistral
        } else if template.contains("<|python_tag|>") || template.contains("ipython") {
            Self::Llama3Json
        } else {
            Self::Hermes
        }
    }

    /// The parser's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hermes => "hermes",
            Self::Llama3Json => "llama3_json",
            Self::Mistral => "mistral",
        }
    }

    /// Splits `text` (everything generated so far; `done` when it is final).
    pub fn parse(self, text: &str, done: bool) -> Parsed {
        match self {
            Self::Hermes => hermes::parse(text, done),
            Self::Llama3Json => llama3::parse(text, done),
            Self::Mistral => mistral::parse(text, done),
        }
    }

    /// Texts that start a call (a tokenizer may have them as special tokens).
    pub fn markers(self) -> &'static [&'static str] {
        match self {
            Self::Hermes => &[hermes::START, hermes::END],
            Self::Llama3Json => &[llama3::PYTHON_TAG],
            Self::Mistral => &[mistral::TOOL_CALLS],
        }
    }

    /// The Lark rules of one call (or several, `parallel`) to `functions` (name, parameter
    /// schema), the top one named `tool_calls` (the caller writes `start`). `literal` writes a
    /// marker as a Lark terminal (a quoted string, or a special token reference when the
    /// vocabulary has it as one).
    pub fn grammar(
        self,
        functions: &[(&str, Value)],
        parallel: bool,
        literal: &dyn Fn(&str) -> String,
    ) -> String {
        let args_key = self.arguments_key();
        let bodies: Vec<String> = functions
            .iter()
            .enumerate()
            .map(|(i, (name, params))| {
                let schema = call_schema(name, params, args_key);
                format!("fn{i}: %json {schema}\n")
            })
            .collect();
        let body_rule = (0..functions.len())
            .map(|i| format!("fn{i}"))
            .collect::<Vec<_>>()
            .join(" | ");
        let (one, sep, open, close) = match self {
            Self::Hermes => (
                format!(
                    "{} \"\\n\" body \"\\n\" {}",
                    literal(hermes::START),
                    literal(hermes::END)
                ),
                "\"\\n\"",
                String::new(),
                String::new(),
            ),
            Self::Llama3Json => ("body".to_string(), "\"; \"", String::new(), String::new()),
            Self::Mistral => (
                "body".to_string(),
                "\", \"",
                format!("{} \"[\" ", literal(mistral::TOOL_CALLS)),
                " \"]\"".to_string(),
            ),
        };
        let calls = if parallel {
            format!("call ({sep} call)*")
        } else {
            "call".to_string()
        };
        format!(
            "tool_calls: {open}{calls}{close}\ncall: {one}\nbody: {body_rule}\n{}",
            bodies.concat()
        )
    }

    /// The key a call's arguments go under.
    pub fn arguments_key(self) -> &'static str {
        match self {
            Self::Llama3Json => "parameters",
            Self::Hermes | Self::Mistral => "arguments",
        }
    }

    /// For a template that cannot render tools: how to call them, for the system message.
    pub fn instructions(self, tools_json: &[String]) -> String {
        match self {
            Self::Hermes => hermes::instructions(tools_json),
            Self::Llama3Json => llama3::instructions(tools_json),
            Self::Mistral => mistral::instructions(tools_json),
        }
    }

    /// For a template that cannot render tools: an assistant message's calls as the model
    /// writes them.
    pub fn format_calls(self, calls: &[ToolCall]) -> String {
        let objects: Vec<String> = calls
            .iter()
            .map(|c| {
                let args = c.function.arguments.trim();
                let args = if args.is_empty() { "{}" } else { args };
                format!(
                    "{{\"name\": {}, \"{}\": {args}}}",
                    Value::String(c.function.name.clone()),
                    self.arguments_key()
                )
            })
            .collect();
        match self {
            Self::Hermes => objects
                .iter()
                .map(|o| format!("{}\n{o}\n{}", hermes::START, hermes::END))
                .collect::<Vec<_>>()
                .join("\n"),
            Self::Llama3Json => objects.join("; "),
            Self::Mistral => format!("{}[{}]", mistral::TOOL_CALLS, objects.join(", ")),
        }
    }
}

/// The schema of one call object: the name (a constant) first, then the arguments.
fn call_schema(name: &str, params: &Value, args_key: &str) -> String {
    let mut properties = serde_json::Map::new();
    properties.insert("name".into(), json!({"const": name}));
    properties.insert(args_key.into(), params.clone());
    let schema = json!({
        "type": "object",
        "properties": Value::Object(properties),
        "required": ["name", args_key],
        "additionalProperties": false,
        "x-guidance": {
            "whitespace_flexible": false,
            "item_separator": JSON_ITEM_SEPARATOR,
            "key_separator": JSON_KEY_SEPARATOR,
        },
    });
    schema.to_string()
}

/// The call in the object whose `{` is at `start`; its arguments are the first of
/// `args_keys` present (`{}` when the finished object has none).
pub(super) fn call_at(text: &str, start: usize, args_keys: &[&str]) -> (PartialCall, Scan) {
    let scan = scan_object(text.as_bytes(), start);
    let member = |key: &str| scan.members.iter().find(|m| m.key == key);
    let name = member("name")
        .filter(|m| m.complete)
        .and_then(|m| serde_json::from_str::<String>(&text[m.value.0..m.value.1]).ok());
    let args = args_keys.iter().find_map(|k| member(k));
    let complete = matches!(scan.scan, Scan::Complete(_));
    let arguments = match args {
        Some(m) => text[m.value.0..m.value.1].to_string(),
        None if complete => "{}".to_string(),
        None => String::new(),
    };
    let call = PartialCall {
        name,
        arguments,
        complete,
    };
    (call, scan.scan)
}

/// Bytes at the end of `text` that could be the start of `marker` (held back while streaming).
pub(super) fn partial_marker_len(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.ends_with(&marker[..n]))
        .unwrap_or(0)
}

/// `text[i..]` after whitespace.
pub(super) fn skip_ws(text: &str, i: usize) -> usize {
    i + text[i..].len() - text[i..].trim_start().len()
}
