//! What the gateway needs to know about a request, read from a small part of its body.

mod deadline;
mod layer;
mod parse;
mod parsed;
mod rewrite;

pub use layer::{Parse, ParseLayer, ParseSettings, body_budget, body_budget_spent};
pub use parse::{PartialBody, PromptSummary, parse_body};
pub use parsed::Parsed;
pub use rewrite::{request_usage_in_stream, with_model};
