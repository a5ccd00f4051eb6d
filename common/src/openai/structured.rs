//! Structured-output wire types: OpenAI's `response_format` and the guided-decoding fields
//! vLLM users send (`guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`), accepted
//! by both generation endpoints.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `response_format`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON that validates against a schema.
    JsonSchema { json_schema: JsonSchemaFormat },
}

/// The `json_schema` member of a `json_schema` response format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchemaFormat {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The schema; absent means any JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// OpenAI's strict mode. The engine enforces every schema it accepts; `strict` makes it
    /// refuse schemas OpenAI's strict mode refuses too (objects must close their properties).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// Constrained-decoding fields common to both endpoints (flattened into each request).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StructuredFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// vLLM extension: a JSON schema (an object, or the schema as a JSON string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_json: Option<Value>,
    /// vLLM extension: the output matches this regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_regex: Option<String>,
    /// vLLM extension: the output is exactly one of these strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_choice: Option<Vec<String>>,
    /// vLLM extension: the output follows this grammar (Lark, or GBNF/EBNF as llguidance
    /// reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_grammar: Option<String>,
    /// vLLM extension: which grammar engine to use; one engine serves every request here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_decoding_backend: Option<String>,
}

impl StructuredFields {
    /// Whether any field asks for constrained output.
    pub fn is_constrained(&self) -> bool {
        let format = !matches!(self.response_format, None | Some(ResponseFormat::Text));
        format
            || self.guided_json.is_some()
            || self.guided_regex.is_some()
            || self.guided_choice.is_some()
            || self.guided_grammar.is_some()
    }
}
