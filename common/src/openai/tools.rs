//! Tool-calling wire types: the `tools` a chat request offers, its `tool_choice`, the calls an
//! assistant message carries (in the history and in responses), and their streamed deltas.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The only `type` of a tool, a tool choice and a tool call OpenAI defines.
pub const TOOL_TYPE_FUNCTION: &str = "function";

fn function_type() -> String {
    TOOL_TYPE_FUNCTION.to_string()
}

/// One entry of a request's `tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// `function` (the only kind).
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionDefinition,
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments object; absent means no arguments (`{}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// Arguments must follow `parameters` exactly (they always do when the engine enforces
    /// the call with its grammar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"`, or one named function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(String),
    Named(NamedToolChoice),
}

/// `{"type": "function", "function": {"name": …}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedToolChoice {
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionName,
}

/// A function named by a tool choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionName {
    pub name: String,
}

/// A call the assistant made: in a response's message, or in the history a client sends back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The function and its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments object as JSON text (as the model wrote it).
    pub arguments: String,
}

/// A piece of a tool call in a stream chunk: the first one of a call carries its `id`, `type`
/// and name; later ones append to `arguments`. `index` says which call of the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCallDelta>,
}

/// The function part of a [`ToolCallDelta`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// Adds a streamed delta to the calls a client puts together: a delta with an `id` starts
/// call `index`, the others append their `arguments` to it. Deltas for a call never started
/// are dropped.
pub fn merge_tool_call_delta(calls: &mut Vec<ToolCall>, delta: &ToolCallDelta) {
    let function = delta.function.clone().unwrap_or_default();
    if let Some(id) = &delta.id {
        calls.push(ToolCall {
            id: id.clone(),
            kind: delta.kind.clone().unwrap_or_else(function_type),
            function: FunctionCall {
                name: function.name.unwrap_or_default(),
                arguments: String::new(),
            },
        });
    }
    if let (Some(call), Some(args)) = (calls.get_mut(delta.index as usize), function.arguments) {
        call.function.arguments.push_str(&args);
    }
}
