//! The request that continues a broken answer on another replica (pure: bytes in, bytes out),
//! built from the body the first replica got, changing only what the continuation needs.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokenscale_common::openai::Resume;

use super::chunk::IdSource;
use super::splice::{Continuation, Splice};
use super::token_prompt::{self, PromptStart};
use crate::json_members::{Member, top_level_members};

/// `max_tokens` of a completion that does not say (OpenAI's, vLLM's and tokenscale's default).
pub(super) const COMPLETIONS_DEFAULT_MAX_TOKENS: u64 = 16;

/// The two generation endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

impl Api {
    /// The endpoint of a request path.
    pub fn of_path(path: &str) -> Option<Self> {
        match path.trim_end_matches('/') {
            "/v1/completions" => Some(Self::Completions),
            "/v1/chat/completions" => Some(Self::Chat),
            _ => None,
        }
    }

    /// The endpoint's path.
    pub fn path(self) -> &'static str {
        match self {
            Self::Completions => "/v1/completions",
            Self::Chat => "/v1/chat/completions",
        }
    }
}

/// Why a request cannot be continued as text.
pub type Unsupported = &'static str;

/// The request continuing an answer: its body, and the endpoint it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Next {
    pub body: Bytes,
    pub api: Api,
}

/// The request continuing `splice`'s answer as `how`, from `original` (the body the first
/// replica got, at `api`).
pub fn body(
    original: &Bytes,
    api: Api,
    how: Continuation,
    splice: &Splice,
) -> Result<Next, Unsupported> {
    let same = |body| Next { body, api };
    match (how, splice.ids_from()) {
        (Continuation::Restart, _) => Ok(same(original.clone())),
        (Continuation::Exact, Some(IdSource::Vllm | IdSource::Llamacpp)) => {
            let prompt = match splice.prompt_ids() {
                Some(ids) => PromptStart::Ids(ids),
                None => PromptStart::AsSent,
            };
            let body = token_prompt::body(original, api, prompt, splice.resume_ids())?;
            Ok(Next {
                body,
                api: Api::Completions,
            })
        }
        (Continuation::Exact, _) => exact(original, splice.token_ids()).map(same),
        (Continuation::Textual, _) => {
            textual(original, api, splice.text(), splice.text_chunks()).map(same)
        }
    }
}

/// The original body with `tokenscale_resume` naming the answer's token ids so far: the
/// engine appends them to the prompt it renders and continues from there, exactly.
fn exact(original: &[u8], token_ids: &[u32]) -> Result<Bytes, Unsupported> {
    let resume = Resume {
        token_ids: token_ids.to_vec(),
    };
    let value = serde_json::to_string(&resume).map_err(|_| "the token ids do not serialise")?;
    let [existing] =
        top_level_members(original, [b"tokenscale_resume"]).ok_or("the body is not an object")?;
    let mut edits = Edits::new(original);
    match existing {
        Some(member) => edits.replace(member, value.into_bytes()),
        None => edits.add(format!(r#""tokenscale_resume":{value}"#)),
    }
    Ok(edits.finish())
}

/// The original body asking for the rest of the answer after `text` (`tokens` tokens, as
/// counted by chunks): completions get the text appended to their prompt, chats an assistant
/// message to continue (`continue_final_message`, vLLM's and SGLang's extension); the token
/// limit shrinks by `tokens`, and a seed is derived so that the continuation does not replay
/// the start's random draws.
fn textual(original: &[u8], api: Api, text: &str, tokens: u64) -> Result<Bytes, Unsupported> {
    let members = top_level_members(
        original,
        [
            b"prompt",
            b"messages",
            b"max_tokens",
            b"max_completion_tokens",
            b"seed",
        ],
    )
    .ok_or("the body is not an object")?;
    let [prompt, messages, max_tokens, max_completion_tokens, seed] = members;
    let raw = |m: Member| &original[m.value..m.end];
    let mut edits = Edits::new(original);
    match api {
        Api::Completions => {
            let prompt = prompt.ok_or("the request has no prompt")?;
            let Ok(start) = serde_json::from_slice::<String>(raw(prompt)) else {
                return Err("only a prompt given as one string can be continued as text");
            };
            edits.replace(prompt, json_string(&format!("{start}{text}")));
        }
        Api::Chat => {
            let messages = messages.ok_or("the request has no messages")?;
            let list: Vec<&RawValue> =
                serde_json::from_slice(raw(messages)).map_err(|_| "the messages are not a list")?;
            if list.last().is_some_and(|m| role_of(m) == Some("assistant")) {
                return Err("the request already ends with an assistant message");
            }
            let mut out = Vec::with_capacity(messages.end - messages.value + text.len() + 64);
            out.push(b'[');
            for message in &list {
                out.extend_from_slice(message.get().as_bytes());
                out.push(b',');
            }
            out.extend_from_slice(br#"{"role":"assistant","content":"#);
            out.extend_from_slice(&json_string(text));
            out.extend_from_slice(b"}]");
            edits.replace(messages, out);
            edits.add(r#""continue_final_message":true,"add_generation_prompt":false"#.into());
        }
    }
    let limit = max_completion_tokens.or(max_tokens);
    match limit {
        Some(member) => {
            let asked: u64 = serde_json::from_slice(raw(member)).map_err(|_| "bad max_tokens")?;
            let left = asked.saturating_sub(tokens).max(1);
            edits.replace(member, left.to_string().into_bytes());
        }
        None if api == Api::Completions => {
            let left = COMPLETIONS_DEFAULT_MAX_TOKENS.saturating_sub(tokens).max(1);
            edits.add(format!(r#""max_tokens":{left}"#));
        }
        None => {}
    }
    if let Some(member) = seed
        && let Ok(seed) = serde_json::from_slice::<i64>(raw(member))
    {
        edits.replace(member, derived_seed(seed, tokens).to_string().into_bytes());
    }
    Ok(edits.finish())
}

/// A seed for the continuation after `tokens` tokens: fixed by the request's seed (so a
/// seeded request stays reproducible) but not its start's draws again; in 0..2^31, which every
/// engine accepts.
pub fn derived_seed(seed: i64, tokens: u64) -> i64 {
    let mut x = (seed as u64) ^ tokens.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((x ^ (x >> 31)) & 0x7fff_ffff) as i64
}

fn role_of(message: &RawValue) -> Option<&str> {
    #[derive(Deserialize)]
    struct Role<'a> {
        #[serde(borrow)]
        role: Option<&'a str>,
    }
    serde_json::from_str::<Role>(message.get()).ok()?.role
}

pub(super) fn json_string(text: &str) -> Vec<u8> {
    serde_json::to_vec(text).unwrap_or_else(|_| b"\"\"".to_vec())
}

/// Member replacements and additions to one JSON object, applied together.
pub(super) struct Edits<'a> {
    original: &'a [u8],
    replaced: Vec<(Member, Vec<u8>)>,
    added: Vec<String>,
}

impl<'a> Edits<'a> {
    pub(super) fn new(original: &'a [u8]) -> Self {
        Self {
            original,
            replaced: Vec::new(),
            added: Vec::new(),
        }
    }

    pub(super) fn replace(&mut self, member: Member, value: Vec<u8>) {
        self.replaced.push((member, value));
    }

    /// Adds members (`"key":value` text) at the start of the object.
    pub(super) fn add(&mut self, members: String) {
        self.added.push(members);
    }

    pub(super) fn finish(mut self) -> Bytes {
        self.replaced.sort_by_key(|(m, _)| m.value);
        let mut out = Vec::with_capacity(self.original.len() + 256);
        // The object's opening brace (the body is an object: `top_level_members` said so).
        let brace = self.original.iter().position(|&b| b == b'{').unwrap_or(0);
        out.extend_from_slice(&self.original[..=brace]);
        let mut at = brace + 1;
        if !self.added.is_empty() {
            out.extend_from_slice(self.added.join(",").as_bytes());
            let rest = self.original[at..].trim_ascii_start();
            if !rest.starts_with(b"}") {
                out.push(b',');
            }
        }
        for (member, value) in &self.replaced {
            out.extend_from_slice(&self.original[at..member.value]);
            out.extend_from_slice(value);
            at = member.end;
        }
        out.extend_from_slice(&self.original[at..]);
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(bytes: &Bytes) -> serde_json::Value {
        serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}: {bytes:?}"))
    }

    #[test]
    fn an_exact_continuation_names_the_token_ids_and_keeps_the_rest() {
        let body = br#"{"model":"m","prompt":"Hi","max_tokens":5,"stream":true}"#;
        let out = exact(body, &[7, 8]).expect("continues");
        let v = json(&out);
        assert_eq!(
            v["tokenscale_resume"]["token_ids"],
            serde_json::json!([7, 8])
        );
        assert_eq!(
            (v["prompt"].as_str(), v["max_tokens"].as_u64()),
            (Some("Hi"), Some(5))
        );
        // A second break replaces the first continuation's ids.
        let again = exact(&out, &[7, 8, 9]).expect("continues");
        assert_eq!(
            json(&again)["tokenscale_resume"]["token_ids"],
            serde_json::json!([7, 8, 9])
        );
        assert_eq!(
            exact(b"{}", &[]).map(|b| json(&b)["tokenscale_resume"]["token_ids"].clone()),
            Ok(serde_json::json!([]))
        );
    }

    #[test]
    fn a_textual_completion_appends_the_text_and_shrinks_the_limit() {
        let body = br#"{"model":"m","prompt":"Say \"hi\"","max_tokens":10,"seed":4,"stream":true}"#;
        let v = json(&textual(body, Api::Completions, " hi\n", 3).expect("continues"));
        assert_eq!(v["prompt"], "Say \"hi\" hi\n");
        assert_eq!(v["max_tokens"], 7);
        assert_eq!(v["seed"], derived_seed(4, 3));
        assert_ne!(v["seed"], 4);
        let no_limit = br#"{"prompt":"x","stream":true}"#;
        assert_eq!(
            json(&textual(no_limit, Api::Completions, "y", 4).expect("ok"))["max_tokens"],
            12
        );
        let ids = br#"{"prompt":[1,2],"stream":true}"#;
        assert!(textual(ids, Api::Completions, "y", 1).is_err());
    }

    #[test]
    fn a_textual_chat_continues_an_assistant_message() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":4,"max_tokens":9}"#;
        let v = json(&textual(body, Api::Chat, "Hel", 2).expect("continues"));
        assert_eq!(
            v["messages"][1],
            serde_json::json!({"role": "assistant", "content": "Hel"})
        );
        assert_eq!(v["continue_final_message"], true);
        assert_eq!(v["add_generation_prompt"], false);
        assert_eq!(
            (
                v["max_completion_tokens"].as_u64(),
                v["max_tokens"].as_u64()
            ),
            (Some(2), Some(9))
        );
        let prefilled = br#"{"messages":[{"role":"assistant","content":"x"}]}"#;
        assert!(textual(prefilled, Api::Chat, "y", 1).is_err());
    }
}
