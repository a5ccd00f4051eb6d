//! Reads `usage` (with `prompt_tokens_details.cached_tokens`) out of engine responses.

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::request::Usage;

#[derive(Deserialize)]
struct WireUsage {
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

/// An SSE chunk's `(usage, has_choices)`; `None` when it is not a JSON object.
pub fn parse_usage_json(json: &[u8]) -> Option<(Option<Usage>, bool)> {
    let parsed: WithUsage = serde_json::from_slice(json).ok()?;
    let usage = parsed.usage.map(|u| Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        cached_tokens: u
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0),
    });
    Some((usage, parsed.choices.is_some_and(|c| !c.is_empty())))
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
    }
}
