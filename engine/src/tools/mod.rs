//! Tool calling: the request's tools validated ([`ToolSet`]), rendered into the prompt through
//! the model's chat template (or, for a template that knows no tools, as instructions in the
//! system message), the model family's call syntax parsed back out of the generated text as it
//! streams ([`ToolCallStreamer`]), and the Lark grammar that enforces a `required` or named
//! call. One [`ToolParser`] per family, chosen from the template or `--tool-call-parser`.

#[cfg(test)]
mod assemble;
mod hermes;
mod json_scan;
mod llama3;
mod mistral;
mod parser;
mod render;
mod set;
mod stream;

pub use parser::{Parsed, PartialCall, ToolParser};
pub use render::{TemplateInputs, template_inputs};
pub use set::{ToolMode, ToolSet, parameters_schema};
pub use stream::{StreamOut, ToolCallStreamer};

/// A request's tools that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{param}: {message}")]
pub struct ToolError {
    /// The request field at fault.
    pub param: String,
    pub message: String,
}

impl ToolError {
    pub(crate) fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: param.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests;
