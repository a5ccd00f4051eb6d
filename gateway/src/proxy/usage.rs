//! Reads `usage` (with `prompt_tokens_details.cached_tokens`) out of engine responses, and
//! estimates an answer's completion tokens when its engine reported none.

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::json_members::{is_non_empty_array, top_level_values};
use crate::vocab::Usage;

/// `usage` as engines write it.
#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WithUsage {
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    choices: Option<Vec<IgnoredAny>>,
}

/// The usage of a whole (non-streaming) response body, if it has one.
pub fn parse_usage(body: &[u8]) -> Option<Usage> {
    parse_usage_json(body).and_then(|(usage, _)| usage)
}

/// An SSE chunk's or a body's `(usage, has_choices)`; `None` when it is not a JSON object.
///
/// Only the `usage` member is parsed; the rest of the object is skipped over byte by byte
/// (see [`top_level_values`]). A body whose top-level keys use escapes is parsed whole.
pub fn parse_usage_json(json: &[u8]) -> Option<(Option<Usage>, bool)> {
    let Some([usage_at, choices_at]) = top_level_values(json, [b"usage", b"choices"]) else {
        return parse_whole(json);
    };
    let usage = match usage_at {
        Some(at) => {
            let mut value = serde_json::Deserializer::from_slice(&json[at..]);
            Option::<WireUsage>::deserialize(&mut value).ok()?
        }
        None => None,
    };
    let has_choices = choices_at.is_some_and(|at| is_non_empty_array(&json[at..]));
    Some((usage.map(Usage::from), has_choices))
}

/// The same, deserialising the whole object.
fn parse_whole(json: &[u8]) -> Option<(Option<Usage>, bool)> {
    let parsed: WithUsage = serde_json::from_slice(json).ok()?;
    let usage = parsed.usage.map(Usage::from);
    Some((usage, parsed.choices.is_some_and(|c| !c.is_empty())))
}

/// The generated text of a whole answer, as far as the estimate needs it.
#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    choices: Vec<AnswerChoice>,
}

#[derive(Deserialize)]
struct AnswerChoice {
    /// `/v1/completions`.
    #[serde(default)]
    text: Option<String>,
    /// `/v1/chat/completions`.
    #[serde(default)]
    message: Option<AnswerMessage>,
}

#[derive(Deserialize)]
struct AnswerMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<serde_json::Value>>,
}

/// The completion tokens of a whole answer whose engine reported no `usage`: the characters
/// it generated (text, content, reasoning, tool calls' JSON) over `chars_per_token`, the
/// same rule the prompt is estimated by. `None` when the body is not an answer.
pub fn estimate_completion_tokens(body: &[u8], chars_per_token: f64) -> Option<u64> {
    let answer: Answer = serde_json::from_slice(body).ok()?;
    let chars: usize = answer
        .choices
        .iter()
        .map(|choice| {
            let text = choice.text.as_deref().map_or(0, |t| t.chars().count());
            let message = choice.message.as_ref().map_or(0, |m| {
                let count = |s: &Option<String>| s.as_deref().map_or(0, |s| s.chars().count());
                let tools = m.tool_calls.as_ref().map_or(0, |calls| {
                    calls.iter().map(|c| c.to_string().chars().count()).sum()
                });
                count(&m.content) + count(&m.reasoning_content) + tools
            });
            text + message
        })
        .sum();
    Some((chars as f64 / chars_per_token).ceil() as u64)
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cached_tokens_and_tolerates_their_absence() {
        let body = br#"{"id":"x","choices":[{"text":"hi"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":8}}}"#;
        assert_eq!(
            parse_usage(body),
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 3,
                cached_tokens: 8
            })
        );
        let chunk = br#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#;
        assert_eq!(
            parse_usage_json(chunk),
            Some((
                Some(Usage {
                    prompt_tokens: 1,
                    completion_tokens: 2,
                    cached_tokens: 0
                }),
                false
            ))
        );
        assert_eq!(parse_usage(b"not json"), None);
        // The member scan and the whole parse agree, escaped keys included.
        for json in [
            &body[..],
            br#"{"choices":[],"usage":null}"#,
            br#"{"\u0075sage":{"prompt_tokens":5},"choices":[1]}"#,
            br#"{"usage":{"prompt_tokens":"five"}}"#,
            br#"{"choices":[{"usage":{"prompt_tokens":9}}]}"#,
        ] {
            assert_eq!(
                parse_usage_json(json),
                parse_whole(json),
                "{}",
                String::from_utf8_lossy(json)
            );
        }
        let escaped = parse_usage(br#"{"\u0075sage":{"prompt_tokens":5}}"#);
        assert_eq!(escaped.map(|u| u.prompt_tokens), Some(5));
    }

    #[test]
    fn an_answer_without_usage_is_estimated_from_what_it_generated() {
        let chat = r#"{"choices":[{"message":{"role":"assistant","content":"Hello there!","reasoning_content":"hmm"}}]}"#;
        // 12 + 3 characters at 4 per token.
        assert_eq!(estimate_completion_tokens(chat.as_bytes(), 4.0), Some(4));
        let text = r#"{"choices":[{"text":"abcd"},{"text":"éé"}]}"#;
        assert_eq!(estimate_completion_tokens(text.as_bytes(), 2.0), Some(3));
        assert_eq!(
            estimate_completion_tokens(br#"{"choices":[]}"#, 4.0),
            Some(0)
        );
        assert_eq!(estimate_completion_tokens(b"not json", 4.0), None);
    }
}
