//! A chat request's `tools`, `tool_choice` and `parallel_tool_calls`, checked: unique valid
//! names, object parameter schemas, a choice that names an offered function.

use serde_json::{Value, json};
use tokenscale_common::openai::{TOOL_TYPE_FUNCTION, Tool, ToolChoice};

use super::ToolError;

/// What the model may or must do with the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolMode {
    /// Tools are not offered (`none`, or no tools).
    None,
    /// The model decides; its calls are parsed from what it writes.
    Auto,
    /// At least one call, enforced by a grammar.
    Required,
    /// Exactly this function, enforced by a grammar.
    Named(String),
}

/// The checked tools of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSet {
    /// The tools as the template receives them (OpenAI's shape).
    pub tools: Vec<Tool>,
    pub mode: ToolMode,
    /// Several calls in one message. OpenAI's default (true) holds for `auto`; a forced choice
    /// (`required` or a named function) writes exactly one call unless the request sets
    /// `parallel_tool_calls: true` itself, as vLLM's named choice does: a grammar that allowed
    /// more would let the model start another call after the first and be cut by
    /// `max_tokens` in it.
    pub parallel: bool,
}

impl ToolSet {
    /// Checks the request's tool fields; `None` when no tool is offered.
    pub fn from_request(
        tools: Option<&[Tool]>,
        choice: Option<&ToolChoice>,
        parallel: Option<bool>,
    ) -> Result<Option<Self>, ToolError> {
        let tools = tools.unwrap_or_default();
        let mode = match choice {
            None if tools.is_empty() => ToolMode::None,
            None => ToolMode::Auto,
            Some(ToolChoice::Mode(m)) => match m.as_str() {
                "none" => ToolMode::None,
                "auto" => ToolMode::Auto,
                "required" => ToolMode::Required,
                other => {
                    return Err(ToolError::new(
                        "tool_choice",
                        format!(
                            "must be \"none\", \"auto\", \"required\" or a named function, got {other:?}"
                        ),
                    ));
                }
            },
            Some(ToolChoice::Named(named)) => {
                if named.kind != TOOL_TYPE_FUNCTION {
                    return Err(ToolError::new(
                        "tool_choice.type",
                        format!("must be \"function\", got {:?}", named.kind),
                    ));
                }
                ToolMode::Named(named.function.name.clone())
            }
        };
        if tools.is_empty() {
            return match mode {
                ToolMode::None => Ok(None),
                _ => Err(ToolError::new(
                    "tool_choice",
                    "tool_choice needs a non-empty `tools` list",
                )),
            };
        }
        check_tools(tools)?;
        if let ToolMode::Named(name) = &mode
            && !tools.iter().any(|t| &t.function.name == name)
        {
            return Err(ToolError::new(
                "tool_choice.function.name",
                format!("no tool named {name:?} in `tools`"),
            ));
        }
        let forced = matches!(mode, ToolMode::Required | ToolMode::Named(_));
        Ok(Some(Self {
            tools: tools.to_vec(),
            mode,
            parallel: parallel.unwrap_or(!forced),
        }))
    }

    /// Whether the tools go into the prompt and the output is parsed for calls.
    pub fn is_offered(&self) -> bool {
        self.mode != ToolMode::None
    }

    /// The functions the grammar allows: all, or the named one.
    pub fn callable(&self) -> Vec<(&str, Value)> {
        self.tools
            .iter()
            .filter(|t| match &self.mode {
                ToolMode::Named(name) => &t.function.name == name,
                _ => true,
            })
            .map(|t| (t.function.name.as_str(), parameters_schema(t)))
            .collect()
    }
}

/// A function's parameter schema; no `parameters` means no arguments at all.
pub fn parameters_schema(tool: &Tool) -> Value {
    tool.function.parameters.clone().unwrap_or_else(
        || json!({"type": "object", "properties": {}, "additionalProperties": false}),
    )
}

fn check_tools(tools: &[Tool]) -> Result<(), ToolError> {
    let mut seen = std::collections::HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        if tool.kind != TOOL_TYPE_FUNCTION {
            return Err(ToolError::new(
                format!("tools[{i}].type"),
                format!("must be \"function\", got {:?}", tool.kind),
            ));
        }
        let name = &tool.function.name;
        // OpenAI's rule: a-z, A-Z, 0-9, underscores and dashes, at most 64.
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(ToolError::new(
                format!("tools[{i}].function.name"),
                format!("{name:?} must be 1 to 64 of a-z, A-Z, 0-9, _ and -"),
            ));
        }
        if !seen.insert(name) {
            return Err(ToolError::new(
                format!("tools[{i}].function.name"),
                format!("{name:?} is offered twice"),
            ));
        }
        if let Some(p) = &tool.function.parameters
            && !p.is_object()
        {
            return Err(ToolError::new(
                format!("tools[{i}].function.parameters"),
                "must be a JSON Schema object",
            ));
        }
    }
    Ok(())
}
