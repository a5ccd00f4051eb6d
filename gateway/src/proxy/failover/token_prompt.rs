//! The body continuing an answer from a token-id prompt (pure: bytes in, bytes out). vLLM
//! and llama-server take a completion's `prompt` as token ids: the prompt's ids and the
//! answer's so far, continued there, give exactly the rest of the answer. A chat continues as
//! a completion of its rendered prompt (vLLM reported its ids), with the chat's sampling.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::continuation::{Api, COMPLETIONS_DEFAULT_MAX_TOKENS, Unsupported, derived_seed};

/// How the continuation's prompt starts, before the answer's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptStart<'a> {
    /// The prompt's token ids, as the engine reported them (vLLM).
    Ids(&'a [u32]),
    /// The completion's own `prompt` (llama-server takes text and ids mixed in one prompt,
    /// and tokenizes the text as it did the first time).
    AsSent,
}

/// Members of a chat request that a completion does not take, or takes in another sense.
const CHAT_ONLY: [&str; 17] = [
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
    "response_format",
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "reasoning_effort",
    "include_reasoning",
    "documents",
    "echo",
    "logprobs",
    "top_logprobs",
];

/// The completion body continuing the answer `generated` of the request `original` (at
/// `api`) from `prompt`.
pub fn body(
    original: &[u8],
    api: Api,
    prompt: PromptStart,
    generated: &[u32],
) -> Result<Bytes, Unsupported> {
    let mut members: BTreeMap<String, &RawValue> =
        serde_json::from_slice(original).map_err(|_| "the body is not an object")?;
    let start = match prompt {
        PromptStart::Ids(ids) => serde_json::to_string(ids).map_err(|_| "bad prompt ids")?,
        PromptStart::AsSent => {
            let sent = members
                .remove("prompt")
                .ok_or("the request has no prompt")?;
            prompt_as_sent(sent.get())?
        }
    };
    members.remove("prompt");
    let ids = serde_json::to_string(generated).map_err(|_| "bad token ids")?;
    // `[start...]` + `[ids...]` as one array.
    let head = start.strip_suffix(']').ok_or("bad prompt")?;
    let tail = ids.strip_prefix('[').ok_or("bad token ids")?;
    let comma = if head == "[" || tail == "]" { "" } else { "," };
    let mut extra: Vec<(&str, String)> = vec![("prompt", format!("{head}{comma}{tail}"))];
    extra.extend(counts(&mut members, api, prompt, generated.len() as u64)?);
    if api == Api::Chat {
        for key in CHAT_ONLY {
            members.remove(key);
        }
    }
    let mut out = String::with_capacity(original.len() + joined_len(&extra));
    out.push('{');
    let rest = members.iter().map(|(k, v)| (k.as_str(), v.get()));
    let all = extra.iter().map(|(k, v)| (*k, v.as_str())).chain(rest);
    for (n, (key, value)) in all.enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).map_err(|_| "bad key")?);
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    Ok(Bytes::from(out))
}

/// The members that count the answer, taken out of `members` and given again for a
/// continuation after `n` tokens: the limits shrink by them, the seed is derived.
fn counts(
    members: &mut BTreeMap<String, &RawValue>,
    api: Api,
    prompt: PromptStart,
    n: u64,
) -> Result<Vec<(&'static str, String)>, Unsupported> {
    let mut out = Vec::new();
    let (newer, older) = (
        members.remove("max_completion_tokens"),
        members.remove("max_tokens"),
    );
    let left = match newer
        .or(older)
        .map(|raw| serde_json::from_str::<Option<u64>>(raw.get()))
    {
        Some(Err(_)) => return Err("bad max_tokens"),
        Some(Ok(Some(asked))) => Some(asked.saturating_sub(n).max(1).to_string()),
        // vLLM's chat default (the model's length less the prompt), asked of its completions.
        Some(Ok(None)) | None if api == Api::Chat => Some("null".to_string()),
        None if matches!(prompt, PromptStart::Ids(_)) => Some(
            COMPLETIONS_DEFAULT_MAX_TOKENS
                .saturating_sub(n)
                .max(1)
                .to_string(),
        ),
        _ => None,
    };
    out.extend(left.map(|left| ("max_tokens", left)));
    let mut read = |key: &str| members.remove(key).map(|raw| raw.get().to_string());
    if let Some(Ok(least)) = read("min_tokens").map(|raw| raw.parse::<u64>()) {
        out.push(("min_tokens", least.saturating_sub(n).to_string()));
    }
    if let Some(Ok(seed)) = read("seed").map(|raw| raw.parse::<i64>()) {
        out.push(("seed", derived_seed(seed, n).to_string()));
    }
    Ok(out)
}

fn joined_len(extra: &[(&str, String)]) -> usize {
    extra.iter().map(|(k, v)| k.len() + v.len() + 4).sum()
}

/// The completion's own prompt as the start of a mixed prompt array: one text, or ids.
fn prompt_as_sent(raw: &str) -> Result<String, Unsupported> {
    if let Ok(text) = serde_json::from_str::<String>(raw) {
        return serde_json::to_string(&[text]).map_err(|_| "bad prompt");
    }
    if serde_json::from_str::<Vec<u32>>(raw).is_ok() {
        return Ok(raw.to_string());
    }
    Err("only one prompt, as text or token ids, can be continued from token ids")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(bytes: Result<Bytes, Unsupported>) -> serde_json::Value {
        let bytes = bytes.expect("continues");
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}: {bytes:?}"))
    }

    #[test]
    fn a_vllm_chat_continues_as_a_completion_of_its_rendered_prompt() {
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"tools":[],"logprobs":false,"max_completion_tokens":10,"temperature":0,"seed":3,"stream":true,"stream_options":{"include_usage":true}}"#;
        let v = json(body(chat, Api::Chat, PromptStart::Ids(&[1, 2]), &[7, 8, 9]));
        assert_eq!(v["prompt"], serde_json::json!([1, 2, 7, 8, 9]));
        assert_eq!(
            (v["max_tokens"].as_u64(), v["temperature"].as_u64()),
            (Some(7), Some(0))
        );
        assert_eq!(v["seed"], derived_seed(3, 3));
        assert_eq!(v["stream_options"]["include_usage"], true);
        for gone in ["messages", "tools", "logprobs", "max_completion_tokens"] {
            assert!(v.get(gone).is_none(), "{gone}: {v}");
        }
        // No limit: the chat's own default, not a completion's 16.
        let open = br#"{"messages":[],"stream":true}"#;
        let v = json(body(open, Api::Chat, PromptStart::Ids(&[1]), &[2]));
        assert_eq!(
            (v["prompt"].clone(), v["max_tokens"].clone()),
            (serde_json::json!([1, 2]), serde_json::Value::Null)
        );
        assert!(v.as_object().is_some_and(|o| o.contains_key("max_tokens")));
    }

    #[test]
    fn a_completion_continues_from_its_ids_or_its_own_prompt_mixed_with_ids() {
        let completion =
            br#"{"model":"m","prompt":"Once","max_tokens":64,"min_tokens":4,"stream":true}"#;
        let v = json(body(
            completion,
            Api::Completions,
            PromptStart::AsSent,
            &[5, 6],
        ));
        assert_eq!(v["prompt"], serde_json::json!(["Once", 5, 6]));
        assert_eq!(
            (v["max_tokens"].as_u64(), v["min_tokens"].as_u64()),
            (Some(62), Some(2))
        );
        let v = json(body(
            completion,
            Api::Completions,
            PromptStart::Ids(&[1, 2]),
            &[],
        ));
        assert_eq!(v["prompt"], serde_json::json!([1, 2]));
        let ids = br#"{"prompt":[3,4]}"#;
        let v = json(body(ids, Api::Completions, PromptStart::AsSent, &[5]));
        assert_eq!(v["prompt"], serde_json::json!([3, 4, 5]));
        assert!(
            v.get("max_tokens").is_none(),
            "llama-server's own default stays"
        );
        let v = json(body(ids, Api::Completions, PromptStart::Ids(&[3, 4]), &[5]));
        assert_eq!(v["max_tokens"], 15);
        let several = br#"{"prompt":["a","b"]}"#;
        assert!(body(several, Api::Completions, PromptStart::AsSent, &[1]).is_err());
    }
}
