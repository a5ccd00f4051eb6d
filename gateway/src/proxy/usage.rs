//! Reads `usage` (with `prompt_tokens_details.cached_tokens`) out of engine responses.

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::json_members::{is_non_empty_array, top_level_values};
use crate::request::Usage;

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
}
