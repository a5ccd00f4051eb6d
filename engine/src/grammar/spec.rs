//! What a request's output must match, and its translation into llguidance's grammar form.
//! JSON is generated with fixed separators and no free whitespace: a model sampling at a high
//! temperature could otherwise spend its whole budget on spaces and newlines inside a valid
//! but never-ending document.

use llguidance::api::TopLevelGrammar;
use serde_json::{Value, json};

use super::GrammarError;

/// Between array items and object members.
pub const JSON_ITEM_SEPARATOR: &str = ", ";
/// Between an object key and its value.
pub const JSON_KEY_SEPARATOR: &str = ": ";

/// A constraint on the generated text. `param` names the request field it came from, so a
/// grammar that cannot be built is a 400 naming that field.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// JSON that validates against `schema` (`{"type": "object"}` for `json_object`).
    JsonSchema { schema: Value, param: String },
    /// Text matching a regular expression (Rust `regex` syntax, anchored at both ends).
    Regex { regex: String, param: String },
    /// Exactly one of these strings.
    Choice { choices: Vec<String>, param: String },
    /// A Lark grammar in llguidance's dialect (`%json {…}` inlines a schema, `<|name|>`
    /// references a special token).
    Lark { grammar: String, param: String },
}

impl Grammar {
    /// The request field this grammar came from.
    pub fn param(&self) -> &str {
        match self {
            Self::JsonSchema { param, .. }
            | Self::Regex { param, .. }
            | Self::Choice { param, .. }
            | Self::Lark { param, .. } => param,
        }
    }

    /// llguidance's form of this grammar.
    pub fn to_llguidance(&self) -> Result<TopLevelGrammar, GrammarError> {
        Ok(match self {
            Self::JsonSchema { schema, param } => {
                TopLevelGrammar::from_json_schema(with_json_layout(schema, param)?)
            }
            Self::Regex { regex, .. } => TopLevelGrammar::from_regex(regex),
            Self::Choice { choices, param } => {
                TopLevelGrammar::from_lark(choice_lark(choices, param)?)
            }
            Self::Lark { grammar, .. } => TopLevelGrammar::from_lark(grammar.clone()),
        })
    }
}

/// `schema` with the engine's JSON layout (unless the schema sets its own `x-guidance`).
pub fn with_json_layout(schema: &Value, param: &str) -> Result<Value, GrammarError> {
    let mut schema = match schema {
        // `true` is JSON Schema for "anything".
        Value::Bool(true) => json!({}),
        Value::Object(_) => schema.clone(),
        other => {
            return Err(GrammarError::unsupported(
                param,
                format!("a JSON schema must be an object, got {other}"),
            ));
        }
    };
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance").or_insert_with(|| {
            json!({
                "whitespace_flexible": false,
                "item_separator": JSON_ITEM_SEPARATOR,
                "key_separator": JSON_KEY_SEPARATOR,
            })
        });
    }
    Ok(schema)
}

/// `start: "a" | "b" | …` (JSON string literals are Lark string literals).
fn choice_lark(choices: &[String], param: &str) -> Result<String, GrammarError> {
    if choices.is_empty() {
        return Err(GrammarError::unsupported(
            param,
            "needs at least one choice",
        ));
    }
    if choices.iter().any(String::is_empty) {
        return Err(GrammarError::unsupported(param, "a choice is empty"));
    }
    let alternatives: Vec<String> = choices
        .iter()
        .map(|c| serde_json::to_string(c).unwrap_or_default())
        .collect();
    Ok(format!("start: {}\n", alternatives.join(" | ")))
}
