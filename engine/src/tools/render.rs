//! A chat's messages and tools as the chat template receives them. A template that renders
//! tools itself (it reads `tools`) gets them as Hugging Face passes them: OpenAI's tool list,
//! assistant calls with their arguments as objects, `tool` messages as they are. A template
//! that knows no tools (SmolLM2's) gets the tools as instructions in the system message, the
//! history's calls written in the parser's syntax, and tool results as `<tool_response>`
//! blocks in a user turn (Qwen2.5's convention).

use serde_json::{Value, json};
use tokenscale_common::openai::{ChatContent, ChatMessage};

use super::{ToolError, ToolParser, ToolSet};

/// What the template renders.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateInputs {
    pub messages: Vec<Value>,
    /// `tools` for the template (`None`: not offered, or written into the messages instead).
    pub tools: Option<Value>,
}

/// The template inputs of `messages` with `tools` (`None` or not offered: no tools in the
/// prompt); `native` when the template reads `tools` itself.
pub fn template_inputs(
    messages: &[ChatMessage],
    tools: Option<&ToolSet>,
    native: bool,
    parser: ToolParser,
) -> Result<TemplateInputs, ToolError> {
    let offered = tools.filter(|t| t.is_offered());
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    for (i, m) in messages.iter().enumerate() {
        let content = text_of(m, i)?;
        if native {
            out.push(native_message(m, content, i)?);
            continue;
        }
        match m.role.as_str() {
            "tool" => {
                let block = format!("<tool_response>\n{content}\n</tool_response>");
                // Consecutive results share one user turn.
                match out.last_mut() {
                    Some(last) if i > 0 && messages[i - 1].role == "tool" => {
                        let joined = format!("{}\n{block}", last["content"].as_str().unwrap_or(""));
                        last["content"] = Value::String(joined);
                    }
                    _ => out.push(json!({"role": "user", "content": block})),
                }
            }
            "assistant" if m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) => {
                let calls = parser.format_calls(m.tool_calls.as_deref().unwrap_or_default());
                let text = if content.is_empty() {
                    calls
                } else {
                    format!("{content}\n{calls}")
                };
                out.push(json!({"role": "assistant", "content": text}));
            }
            role => out.push(json!({"role": role, "content": content})),
        }
    }
    let Some(set) = offered else {
        return Ok(TemplateInputs {
            messages: out,
            tools: None,
        });
    };
    let tool_values: Vec<Value> = set
        .tools
        .iter()
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
        .collect();
    if native {
        return Ok(TemplateInputs {
            messages: out,
            tools: Some(Value::Array(tool_values)),
        });
    }
    let listed: Vec<String> = tool_values.iter().map(Value::to_string).collect();
    let instructions = parser.instructions(&listed);
    match out.first_mut() {
        Some(first) if first["role"] == "system" => {
            let text = format!(
                "{}\n\n{instructions}",
                first["content"].as_str().unwrap_or("")
            );
            first["content"] = Value::String(text);
        }
        _ => out.insert(0, json!({"role": "system", "content": instructions})),
    }
    Ok(TemplateInputs {
        messages: out,
        tools: None,
    })
}

/// The message's text; parts other than text are refused (never silently dropped).
fn text_of(m: &ChatMessage, i: usize) -> Result<String, ToolError> {
    match &m.content {
        None => Ok(String::new()),
        Some(ChatContent::Text(t)) => Ok(t.clone()),
        Some(ChatContent::Parts(parts)) => {
            if let Some((j, part)) = parts.iter().enumerate().find(|(_, p)| p.kind != "text") {
                return Err(ToolError::new(
                    format!("messages[{i}].content[{j}].type"),
                    format!(
                        "content parts of type {:?} are not supported (this model reads text only)",
                        part.kind
                    ),
                ));
            }
            Ok(parts.iter().filter_map(|p| p.text.as_deref()).collect())
        }
    }
}

/// A message as Hugging Face templates read it: calls' arguments as objects.
fn native_message(m: &ChatMessage, content: String, i: usize) -> Result<Value, ToolError> {
    let mut v = json!({"role": m.role, "content": content});
    if let Some(name) = &m.name {
        v["name"] = json!(name);
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    if let Some(calls) = &m.tool_calls {
        let mut list = Vec::with_capacity(calls.len());
        for (j, c) in calls.iter().enumerate() {
            let args = c.function.arguments.trim();
            let args: Value = if args.is_empty() {
                json!({})
            } else {
                serde_json::from_str(args).map_err(|e| {
                    ToolError::new(
                        format!("messages[{i}].tool_calls[{j}].function.arguments"),
                        format!("is not JSON: {e}"),
                    )
                })?
            };
            list.push(json!({"id": c.id, "type": c.kind,
                "function": {"name": c.function.name, "arguments": args}}));
        }
        v["tool_calls"] = Value::Array(list);
    }
    Ok(v)
}
