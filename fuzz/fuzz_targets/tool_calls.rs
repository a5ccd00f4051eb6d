//! Fuzz target: the engine's tool-call parsers and their streamer on any text cut into any
//! pieces. Nothing may panic, and for every family the deltas of the text pushed in pieces
//! must add up to the deltas of the text pushed whole (same content, same calls, same
//! arguments): a streamed reply always equals the plain one.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

/// The two constants the parsers take from the engine's grammar module.
mod grammar {
    pub const JSON_ITEM_SEPARATOR: &str = ", ";
    pub const JSON_KEY_SEPARATOR: &str = ": ";
}

// The engine's `tools` files that parse text, compiled here directly at the crate root (they
// name each other through `super::`); the rest of the module renders prompts and needs the
// whole engine.
#[path = "../../engine/src/tools/assemble.rs"]
mod assemble;
#[path = "../../engine/src/tools/hermes.rs"]
mod hermes;
#[path = "../../engine/src/tools/json_scan.rs"]
mod json_scan;
#[path = "../../engine/src/tools/llama3.rs"]
mod llama3;
#[path = "../../engine/src/tools/mistral.rs"]
#[allow(dead_code)]
mod mistral;
#[path = "../../engine/src/tools/parser.rs"]
#[allow(dead_code)]
mod parser;
#[path = "../../engine/src/tools/stream.rs"]
#[allow(dead_code)]
mod stream;

/// The parsers' error type, as far as they use it.
#[derive(Debug)]
pub struct ToolError;

impl ToolError {
    pub(crate) fn new(_param: impl Into<String>, _message: impl Into<String>) -> Self {
        Self
    }
}

use assemble::assemble;
use parser::ToolParser;
use stream::{StreamOut, ToolCallStreamer};

/// The property, for any input.
fn check(data: &[u8]) {
    // First byte: where to cut (a cut every `step` characters).
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let step = usize::from(step % 16) + 1;
    for parser in [
        ToolParser::Hermes,
        ToolParser::Llama3Json,
        ToolParser::Mistral,
    ] {
        for parallel in [true, false] {
            let mut whole = ToolCallStreamer::new(parser, parallel);
            let whole = assemble(vec![whole.push(&text), whole.finish()]);
            let mut pieces = ToolCallStreamer::new(parser, parallel);
            let chars: Vec<char> = text.chars().collect();
            let mut outs: Vec<StreamOut> = chars
                .chunks(step)
                .map(|c| pieces.push(&c.iter().collect::<String>()))
                .collect();
            outs.push(pieces.finish());
            assert_eq!(
                assemble(outs),
                whole,
                "{parser:?} parallel={parallel} step={step}"
            );
        }
    }
}

fuzz_main!("tool_calls");
