//! Request members the server has no field for. OpenAI answers an unknown member with a 400,
//! and so does this server: a member that would change the output if honoured must never be
//! dropped silently. The exceptions are the members listed in [`ACCEPTED_IGNORED`], which
//! change nothing here (the README's API section lists them, with the fields that are
//! refused by name).

use std::collections::BTreeMap;

use serde_json::Value;

use super::ApiError;

/// Members accepted and ignored, with why ignoring them changes nothing.
pub const ACCEPTED_IGNORED: &[(&str, &str)] = &[
    ("store", "nothing is stored by this engine"),
    ("metadata", "only used with `store`"),
    ("service_tier", "there is one tier"),
    (
        "prompt_cache_key",
        "prefix caching is automatic (`cache_salt` isolates tenants)",
    ),
    (
        "safety_identifier",
        "abuse tracking happens elsewhere, like `user`",
    ),
    ("request_id", "the engine names its responses itself"),
];

/// Members refused with a hint (every other unknown member is refused too).
const REFUSED_WITH_HINT: &[(&str, &str)] = &[
    (
        "functions",
        "the deprecated function-calling API is not supported; send `tools`",
    ),
    (
        "function_call",
        "the deprecated function-calling API is not supported; send `tool_choice`",
    ),
    (
        "reasoning_effort",
        "reasoning_effort is not supported; chat_template_kwargs reach the template (Qwen3: {\"enable_thinking\": false})",
    ),
    ("audio", "audio output is not supported"),
    ("prediction", "predicted outputs are not supported"),
    ("web_search_options", "web search is not supported"),
    ("best_of", "best_of is not supported; use n"),
    ("suffix", "insertion (suffix) is not supported"),
    (
        "guided_whitespace_pattern",
        "the JSON layout is fixed (\", \" and \": \")",
    ),
    (
        "structured_outputs",
        "send response_format or the guided_* fields",
    ),
];

/// Accepts `extra` (the members no field took) or names the first it refuses. `read_here`
/// are the members the endpoint reads out of `extra` itself (`logit_bias`). A `null` member
/// is the same as an absent one; `modalities: ["text"]` asks for nothing and is accepted.
pub fn check_extra(extra: &BTreeMap<String, Value>, read_here: &[&str]) -> Result<(), ApiError> {
    for (name, value) in extra {
        if value.is_null()
            || read_here.contains(&name.as_str())
            || ACCEPTED_IGNORED.iter().any(|(n, _)| n == name)
        {
            continue;
        }
        let asks_nothing = match name.as_str() {
            "modalities" => value
                .as_array()
                .is_some_and(|a| a.iter().all(|m| m == "text")),
            _ => false,
        };
        if asks_nothing {
            continue;
        }
        let reason = REFUSED_WITH_HINT
            .iter()
            .find(|(n, _)| n == name)
            .map_or("this engine does not implement it", |(_, hint)| hint);
        return Err(ApiError::invalid_param(
            name,
            format!("unsupported parameter `{name}`: {reason}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Option<String> {
        let extra: BTreeMap<String, Value> = serde_json::from_str(json).unwrap_or_default();
        check_extra(&extra, &["logit_bias"])
            .err()
            .and_then(|e| e.param)
    }

    #[test]
    fn ignored_members_pass_and_others_are_named() {
        assert_eq!(
            check(r#"{"store": true, "metadata": {"a": "b"}, "user_x": null}"#),
            None
        );
        assert_eq!(
            check(r#"{"logit_bias": {"50256": -100}, "modalities": ["text"]}"#),
            None
        );
        assert_eq!(
            check(r#"{"prompt_logprobs": 1}"#).as_deref(),
            Some("prompt_logprobs")
        );
        assert_eq!(
            check(r#"{"modalities": ["audio"]}"#).as_deref(),
            Some("modalities")
        );
        assert_eq!(check(r#"{"frobnicate": 1}"#).as_deref(), Some("frobnicate"));
    }
}
