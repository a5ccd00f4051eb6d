//! Partial, borrowed parse of an OpenAI request body: only the fields the gateway acts on.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use serde::Deserialize;
use serde_json::value::RawValue;
use tokenscale_common::openai::{error_reason, member_at_fault};

use crate::error::GatewayError;

/// The fields of a completions or chat request the gateway reads; everything else is
/// ignored and forwarded untouched.
#[derive(Debug, Deserialize)]
pub struct PartialBody<'a> {
    /// Served model name.
    #[serde(borrow)]
    pub model: Option<Cow<'a, str>>,
    /// SSE or not.
    pub stream: Option<bool>,
    /// Raw `stream_options`, kept raw so its span can be rewritten in place. An explicit
    /// `null` is kept too (as the raw `null`): read as absent, the gateway would add a second
    /// `stream_options` member beside it, which strict engines reject as a duplicate field.
    #[serde(borrow, default, deserialize_with = "raw_even_if_null")]
    pub stream_options: Option<&'a RawValue>,
    /// Legacy output cap.
    pub max_tokens: Option<i64>,
    /// Newer output cap (chat).
    pub max_completion_tokens: Option<i64>,
    /// Completions per prompt.
    pub n: Option<i64>,
    /// `"interactive"` / `"batch"`, or vLLM's integer priority (ignored).
    #[serde(borrow)]
    pub priority: Option<&'a RawValue>,
    /// Completions prompt: text, texts, token ids or lists of token ids.
    #[serde(borrow)]
    pub prompt: Option<&'a RawValue>,
    /// Chat messages.
    #[serde(borrow)]
    pub messages: Option<&'a RawValue>,
    /// Chat tools: the engine renders them into the prompt, so they count as prompt text.
    #[serde(borrow)]
    pub tools: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Texts(Vec<Cow<'a, str>>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(default)]
    content: Option<Content<'a>>,
    /// An assistant message's calls, rendered back into the prompt.
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// Size and leading-prefix hash of a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptSummary {
    /// Characters of prompt text (token ids count 4 each, so the estimate is ~1 per id).
    pub chars: u64,
    /// Hash of the first `prefix_chars` characters; `None` when affinity is off or the
    /// prompt is empty.
    pub prefix_hash: Option<u64>,
}

/// A member's raw value, `null` included (serde reads `null` as `None` for an `Option`).
fn raw_even_if_null<'de, D>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// Parses the partial body, mapping JSON errors to a 400 that quotes serde's reason and,
/// for a member of the wrong type, names it.
pub fn parse_body(body: &[u8]) -> Result<PartialBody<'_>, GatewayError> {
    serde_json::from_slice(body).map_err(|e| {
        let parse = |b: &[u8]| serde_json::from_slice::<PartialBody>(b).err();
        let message = match member_at_fault(body, &e, parse) {
            Some(member) => format!("Invalid JSON body: {member}: {}", error_reason(&e)),
            None => format!("Invalid JSON body: {e}"),
        };
        GatewayError::bad_request(message, None)
    })
}

impl PartialBody<'_> {
    /// Sizes the prompt (or messages) and hashes its first `prefix_chars` characters.
    pub fn summarize_prompt(&self, prefix_chars: usize) -> Result<PromptSummary, GatewayError> {
        let mut acc = PrefixAccumulator::new(prefix_chars);
        if let Some(raw) = self.prompt {
            let prompt: Prompt = serde_json::from_str(raw.get()).map_err(|_| {
                GatewayError::bad_request(
                    "`prompt` must be a string, strings, token ids or lists of token ids",
                    Some("prompt"),
                )
            })?;
            match prompt {
                Prompt::Text(text) => acc.text(&text),
                Prompt::Texts(texts) => texts.iter().for_each(|t| acc.text(t)),
                Prompt::Tokens(ids) => acc.tokens(&ids),
                Prompt::TokenLists(lists) => lists.iter().for_each(|ids| acc.tokens(ids)),
            }
        } else if let Some(raw) = self.messages {
            let messages: Vec<Message> = serde_json::from_str(raw.get()).map_err(|_| {
                GatewayError::bad_request(
                    "`messages` must be a list of {role, content}",
                    Some("messages"),
                )
            })?;
            for message in &messages {
                acc.text(message.role.as_deref().unwrap_or(""));
                acc.text("\n");
                match &message.content {
                    Some(Content::Text(text)) => acc.text(text),
                    Some(Content::Parts(parts)) => parts
                        .iter()
                        .filter_map(|p| p.text.as_deref())
                        .for_each(|t| acc.text(t)),
                    None => {}
                }
                if let Some(calls) = message.tool_calls {
                    acc.text(calls.get());
                }
                acc.text("\n");
            }
            // The engine writes the tools into the prompt (as JSON, near enough in size).
            if let Some(tools) = self.tools {
                acc.text(tools.get());
            }
        } else {
            return Err(GatewayError::bad_request(
                "the request has neither `prompt` nor `messages`",
                None,
            ));
        }
        Ok(acc.finish())
    }

    /// `max_completion_tokens`, else `max_tokens`, validated as non-negative.
    pub fn max_output_tokens(&self) -> Result<Option<u64>, GatewayError> {
        let (value, param) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(v), _) => (v, "max_completion_tokens"),
            (None, Some(v)) => (v, "max_tokens"),
            (None, None) => return Ok(None),
        };
        u64::try_from(value)
            .map(Some)
            .map_err(|_| GatewayError::bad_request(format!("`{param}` must be ≥ 0"), Some(param)))
    }

    /// Completion tokens to reserve against the output limit: the output cap (or
    /// `default_max_tokens` when the client set none) times `n`, validated in 1..=128. One
    /// definition for the live request path and batch input validation, so both reserve alike.
    pub fn reserved_output_tokens(&self, default_max_tokens: u64) -> Result<u64, GatewayError> {
        let n = match self.n {
            None => 1,
            Some(n) if (1..=128).contains(&n) => n as u64,
            Some(_) => {
                return Err(GatewayError::bad_request(
                    "`n` must be in 1..=128",
                    Some("n"),
                ));
            }
        };
        let max_output = self.max_output_tokens()?.unwrap_or(default_max_tokens);
        Ok(max_output.saturating_mul(n))
    }
}

impl PromptSummary {
    /// Prompt tokens estimated from the prompt's characters, rounded up.
    pub fn estimated_tokens(&self, chars_per_token: f64) -> u64 {
        (self.chars as f64 / chars_per_token).ceil() as u64
    }
}

/// Counts characters and hashes the leading ones as text arrives piece by piece.
struct PrefixAccumulator {
    limit: usize,
    hashed: usize,
    chars: u64,
    hasher: std::collections::hash_map::DefaultHasher,
}

impl PrefixAccumulator {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            hashed: 0,
            chars: 0,
            hasher: Default::default(),
        }
    }

    fn text(&mut self, text: &str) {
        let count = text.chars().count();
        self.chars += count as u64;
        if self.hashed < self.limit {
            let take = (self.limit - self.hashed).min(count);
            let end = text.char_indices().nth(take).map_or(text.len(), |(i, _)| i);
            text[..end].hash(&mut self.hasher);
            self.hashed += take;
        }
    }

    fn tokens(&mut self, ids: &[u32]) {
        // One id is roughly four characters of text.
        self.chars += 4 * ids.len() as u64;
        let budget = (self.limit - self.hashed.min(self.limit)) / 4;
        let take = budget.min(ids.len());
        ids[..take].hash(&mut self.hasher);
        self.hashed += 4 * take;
    }

    fn finish(self) -> PromptSummary {
        let prefix_hash = (self.limit > 0 && self.hashed > 0).then(|| self.hasher.finish());
        PromptSummary {
            chars: self.chars,
            prefix_hash,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(body: &str, prefix: usize) -> PromptSummary {
        parse_body(body.as_bytes())
            .expect("parses")
            .summarize_prompt(prefix)
            .expect("prompt")
    }

    #[test]
    fn shared_prefixes_hash_alike_and_different_ones_do_not() {
        let a = summary(
            r#"{"model":"m","prompt":"You are a helpful assistant. Question one"}"#,
            20,
        );
        let b = summary(
            r#"{"model":"m","prompt":"You are a helpful assistant. Question two"}"#,
            20,
        );
        let c = summary(
            r#"{"model":"m","prompt":"Something else entirely, longer"}"#,
            20,
        );
        assert_eq!(a.prefix_hash, b.prefix_hash);
        assert_ne!(a.prefix_hash, c.prefix_hash);
        assert_eq!(a.chars, 41);
    }

    #[test]
    fn chat_messages_are_sized_and_bad_shapes_are_400() {
        let s = summary(
            r#"{"model":"m","messages":[{"role":"user","content":"héllo"}]}"#,
            0,
        );
        assert_eq!(s.chars, "user\nhéllo\n".chars().count() as u64);
        assert_eq!(s.prefix_hash, None);
        let bad = parse_body(br#"{"model":"m","messages":"hi"}"#).expect("parses");
        assert!(bad.summarize_prompt(10).is_err());
        assert!(parse_body(br#"{"model":"m","max_tokens":"x"}"#).is_err());
        let neg = parse_body(br#"{"model":"m","max_tokens":-1,"prompt":"x"}"#).expect("parses");
        assert!(neg.max_output_tokens().is_err());
    }

    #[test]
    fn a_member_of_the_wrong_type_is_named() {
        let message = |body: &str| match parse_body(body.as_bytes()) {
            Ok(_) => String::new(),
            Err(err) => err.to_string(),
        };
        assert_eq!(
            message(r#"{"model":"m","prompt":"x","stream":"yes"}"#),
            "Invalid JSON body: stream: invalid type: string \"yes\", expected a boolean"
        );
        assert!(message(r#"{"model":"m","n":"2"}"#).starts_with("Invalid JSON body: n: "));
        assert!(message(r#"{"model":"m","prompt":"#).contains("EOF while parsing"));
    }

    #[test]
    fn tools_and_tool_calls_count_as_prompt_text() {
        let tools = r#"[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]"#;
        let calls = r#"[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]"#;
        let plain = summary(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            0,
        );
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}},{{"role":"assistant","content":null,"tool_calls":{calls}}}],"tools":{tools}}}"#
        );
        let with_tools = summary(&body, 0);
        let extra = ("assistant\n\n".len() + calls.len() + tools.len()) as u64;
        assert_eq!(with_tools.chars, plain.chars + extra);
    }
}
