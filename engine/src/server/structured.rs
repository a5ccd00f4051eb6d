//! From a request's structured-output and tool fields to the one grammar its output must
//! follow (if any), compiled off the async reactor. At most one of `response_format`,
//! `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar` may constrain a request;
//! with tools, `required` and a named choice force calls, and `auto` with a JSON format
//! allows either calls or the formatted answer.

use std::sync::Arc;

use serde_json::{Value, json};
use tokenscale_common::openai::{ResponseFormat, StructuredFields};

use super::ApiError;
use super::state::LoadedModel;
use crate::grammar::{Constraint, Grammar, GrammarCompiler, GrammarError};
use crate::tokenizer::Tokenizer;
use crate::tools::{ToolMode, ToolParser, ToolSet};

impl From<GrammarError> for ApiError {
    fn from(err: GrammarError) -> Self {
        match err {
            GrammarError::Unsupported { param, message } => {
                Self::invalid_param(&param, format!("{param}: cannot be enforced: {message}"))
            }
            other => Self::internal(other.to_string()),
        }
    }
}

/// The grammar the structured-output fields ask for.
pub fn requested(fields: &StructuredFields) -> Result<Option<Grammar>, ApiError> {
    let mut found: Vec<Grammar> = Vec::new();
    match &fields.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => found.push(Grammar::JsonSchema {
            schema: json!({"type": "object"}),
            param: "response_format".into(),
        }),
        Some(ResponseFormat::JsonSchema { json_schema }) => found.push(Grammar::JsonSchema {
            schema: json_schema.schema.clone().unwrap_or_else(|| json!({})),
            param: "response_format.json_schema.schema".into(),
        }),
    }
    if let Some(schema) = &fields.guided_json {
        let schema = match schema {
            // vLLM takes the schema as an object or as its JSON text.
            Value::String(text) => serde_json::from_str(text).map_err(|e| {
                ApiError::invalid_param("guided_json", format!("guided_json is not JSON: {e}"))
            })?,
            other => other.clone(),
        };
        found.push(Grammar::JsonSchema {
            schema,
            param: "guided_json".into(),
        });
    }
    if let Some(regex) = &fields.guided_regex {
        found.push(Grammar::Regex {
            regex: regex.clone(),
            param: "guided_regex".into(),
        });
    }
    if let Some(choices) = &fields.guided_choice {
        found.push(Grammar::Choice {
            choices: choices.clone(),
            param: "guided_choice".into(),
        });
    }
    if let Some(grammar) = &fields.guided_grammar {
        found.push(Grammar::Lark {
            grammar: grammar.clone(),
            param: "guided_grammar".into(),
        });
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|g| field_of(g.param())).collect();
        return Err(ApiError::invalid_param(
            names[1],
            format!(
                "{} constrain the output together; set only one",
                names.join(" and ")
            ),
        ));
    }
    Ok(found.pop())
}

fn field_of(param: &str) -> &str {
    param.split('.').next().unwrap_or(param)
}

/// The grammar of a chat: the structured one, the tool calls, or the choice between them.
pub fn for_chat(
    structured: Option<Grammar>,
    tools: Option<&ToolSet>,
    parser: ToolParser,
    tokenizer: &Tokenizer,
) -> Result<Option<Grammar>, ApiError> {
    let Some(set) = tools.filter(|t| t.is_offered()) else {
        return Ok(structured);
    };
    let literal = |text: &str| marker_literal(tokenizer, text);
    let rules = parser.grammar(&set.callable(), set.parallel, &literal);
    let forced = matches!(set.mode, ToolMode::Required | ToolMode::Named(_));
    match (forced, structured) {
        (false, None) => Ok(None),
        (true, None) => Ok(Some(Grammar::Lark {
            grammar: format!("start: tool_calls\n{rules}"),
            param: "tools".into(),
        })),
        (true, Some(g)) => Err(ApiError::invalid_param(
            field_of(g.param()),
            "a structured output cannot be combined with tool_choice `required` or a named \
             function: the reply is a tool call",
        )),
        (false, Some(Grammar::JsonSchema { schema, param })) => {
            let schema = crate::grammar::with_json_layout(&schema, &param)?;
            Ok(Some(Grammar::Lark {
                grammar: format!("start: tool_calls | answer\nanswer: %json {schema}\n{rules}"),
                param,
            }))
        }
        (false, Some(g)) => Err(ApiError::invalid_param(
            field_of(g.param()),
            "with tools, only a JSON response_format (or guided_json) can shape the answer",
        )),
    }
}

/// A marker as a Lark terminal: the special token itself when the vocabulary has it as one
/// (`<[id]>`), else the quoted text.
fn marker_literal(tokenizer: &Tokenizer, text: &str) -> String {
    match tokenizer.encode(text, false).as_deref() {
        Ok([id]) if tokenizer.is_special(*id) => format!("<[{id}]>"),
        _ => serde_json::to_string(text).unwrap_or_default(),
    }
}

/// Whether any of `parser`'s markers is one special token here (its text then only shows when
/// special tokens are decoded).
pub fn markers_are_special(tokenizer: &Tokenizer, parser: ToolParser) -> bool {
    parser
        .markers()
        .iter()
        .any(|m| marker_literal(tokenizer, m).starts_with("<["))
}

/// Checks each callable function's parameter schema alone (so a schema the engine cannot
/// enforce is named by its own field), then compiles `grammar`, on a blocking thread.
pub async fn compile(
    model: &LoadedModel,
    grammar: Grammar,
    tools: Option<&ToolSet>,
) -> Result<Constraint, ApiError> {
    let lazy = model.grammar.clone();
    let mut checks: Vec<Grammar> = Vec::new();
    if let Some(set) = tools.filter(|_| grammar.param() == "tools" || grammar_has_calls(&grammar)) {
        for (i, tool) in set.tools.iter().enumerate() {
            checks.push(Grammar::JsonSchema {
                schema: crate::tools::parameters_schema(tool),
                param: format!("tools[{i}].function.parameters"),
            });
        }
    }
    tokio::task::spawn_blocking(move || {
        let compiler: Arc<GrammarCompiler> = lazy.get().map_err(|reason| {
            GrammarError::unsupported(
                grammar.param(),
                format!("this model cannot do constrained decoding: {reason}"),
            )
        })?;
        for check in &checks {
            compiler.compile(check)?;
        }
        compiler.compile(&grammar)
    })
    .await
    .map_err(|e| ApiError::internal(format!("grammar compilation: {e}")))?
    .map_err(ApiError::from)
}

fn grammar_has_calls(grammar: &Grammar) -> bool {
    matches!(grammar, Grammar::Lark { grammar, .. } if grammar.contains("tool_calls"))
}
