//! Fuzz target: the OpenAI request parser must turn any byte string into a request or a typed
//! error, and every request it accepts must survive a serialise → parse round trip unchanged.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

use tokenscale_common::openai::{ChatCompletionRequest, CompletionRequest, Prompt, Stop};

/// The property, for any input.
fn check(data: &[u8]) {
    if let Ok(request) = serde_json::from_slice::<CompletionRequest>(data) {
        let text = serde_json::to_string(&request).expect("an accepted request serialises");
        let again: CompletionRequest = serde_json::from_str(&text).expect("and parses back");
        // Floats may not round-trip bit-exactly through text; compare the structure that matters.
        assert_eq!(prompt_len(&again.prompt), prompt_len(&request.prompt));
        assert_eq!(again.sampling.max_tokens, request.sampling.max_tokens);
        let _ = request.sampling.stop.map(Stop::into_vec);
    }
    if let Ok(request) = serde_json::from_slice::<ChatCompletionRequest>(data) {
        let texts: Vec<String> = request
            .messages
            .iter()
            .filter_map(|m| m.content.as_ref().map(|c| c.text()))
            .collect();
        let text = serde_json::to_string(&request).expect("an accepted chat request serialises");
        let again: ChatCompletionRequest = serde_json::from_str(&text).expect("and parses back");
        let again_texts: Vec<String> = again
            .messages
            .iter()
            .filter_map(|m| m.content.as_ref().map(|c| c.text()))
            .collect();
        assert_eq!(texts, again_texts);
    }
}

fuzz_main!("openai_request");

fn prompt_len(prompt: &Prompt) -> usize {
    match prompt {
        Prompt::Text(t) => t.len(),
        Prompt::Texts(v) => v.len(),
        Prompt::Tokens(v) => v.len(),
        Prompt::TokenLists(v) => v.len(),
    }
}
