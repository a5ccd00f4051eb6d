//! A chat answer continued on `/v1/completions` (pure: no I/O): vLLM's chat endpoint takes no
//! token-id prompt, so an exact continuation of a chat runs as a completion of the rendered
//! prompt's ids plus the answer's, and each completion chunk is written back as the chat
//! chunk vLLM's chat endpoint would have sent. A break during reasoning continues the
//! reasoning: its text goes out as reasoning until the end-of-reasoning marker, the rest as
//! content, as the first replica's reasoning parser would have split it.

use serde::Deserialize;
use serde_json::value::RawValue;

/// Where reasoning ends in the raw text of the reasoning models vLLM parses (DeepSeek-R1,
/// Qwen3 and their kin).
const REASONING_END: &str = "</think>";

/// The state of one chat stream fed by completion chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reshape {
    /// The delta member reasoning text goes to while the answer is still reasoning
    /// (`reasoning` or `reasoning_content`, as the first replica wrote it); `None` once the
    /// content started.
    reasoning: Option<&'static str>,
    /// Text that may be the start of [`REASONING_END`], held until the next chunk says.
    held: String,
}

#[derive(Deserialize)]
struct Completion<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    created: Option<&'a RawValue>,
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    choices: Option<Vec<CompletionChoice<'a>>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CompletionChoice<'a> {
    #[serde(default)]
    index: u64,
    #[serde(default)]
    text: String,
    #[serde(borrow, default)]
    finish_reason: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stop_reason: Option<&'a RawValue>,
    #[serde(borrow, default)]
    token_ids: Option<&'a RawValue>,
}

impl Reshape {
    /// A continuation whose answer was still reasoning into `reasoning` (the delta member),
    /// or (`None`) was already writing content.
    pub fn new(reasoning: Option<&'static str>) -> Self {
        Self {
            reasoning,
            held: String::new(),
        }
    }

    /// The chat chunk (JSON) for a completion chunk's JSON; `None` for anything else (an
    /// error event), which goes on as it came.
    pub fn chat_chunk(&mut self, json: &[u8]) -> Option<Vec<u8>> {
        let chunk: Completion = serde_json::from_slice(json).ok()?;
        let raw = |v: Option<&RawValue>| v.map_or("null", RawValue::get).to_string();
        let mut out = format!(
            r#"{{"id":{},"object":"chat.completion.chunk","created":{},"model":{},"choices":["#,
            raw(chunk.id),
            raw(chunk.created),
            raw(chunk.model)
        );
        for (n, choice) in chunk.choices.unwrap_or_default().iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            let finish = choice.finish_reason.filter(|f| f.get() != "null");
            let delta = self.delta(&choice.text, finish.is_some());
            out.push_str(&format!(
                r#"{{"index":{},"delta":{delta},"logprobs":null,"finish_reason":{}"#,
                choice.index,
                raw(finish)
            ));
            if finish.is_some() {
                out.push_str(&format!(r#","stop_reason":{}"#, raw(choice.stop_reason)));
            }
            out.push_str(&format!(r#","token_ids":{}}}"#, raw(choice.token_ids)));
        }
        out.push(']');
        if let Some(usage) = chunk.usage.filter(|u| u.get() != "null") {
            out.push_str(&format!(r#","usage":{}"#, usage.get()));
        }
        out.push('}');
        Some(out.into_bytes())
    }

    /// The delta for `text`: reasoning up to the marker, content after it; at the `last`
    /// chunk, held text goes out as it is.
    fn delta(&mut self, text: &str, last: bool) -> String {
        let Some(member) = self.reasoning else {
            return members(None, text);
        };
        let mut pending = std::mem::take(&mut self.held);
        pending.push_str(text);
        if let Some(at) = pending.find(REASONING_END) {
            self.reasoning = None;
            let content = &pending[at + REASONING_END.len()..];
            return members(Some((member, &pending[..at])), content);
        }
        let keep = if last { 0 } else { marker_prefix_len(&pending) };
        self.held = pending.split_off(pending.len() - keep);
        members(Some((member, &pending)), "")
    }
}

/// The length of the longest end of `text` that starts [`REASONING_END`].
fn marker_prefix_len(text: &str) -> usize {
    (1..REASONING_END.len())
        .rev()
        .find(|&n| text.ends_with(&REASONING_END[..n]))
        .unwrap_or(0)
}

/// A delta object with the non-empty members of `reasoning` (member, text) and `content`.
fn members(reasoning: Option<(&str, &str)>, content: &str) -> String {
    let string = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut parts = Vec::new();
    if let Some((member, text)) = reasoning.filter(|(_, t)| !t.is_empty()) {
        parts.push(format!(r#""{member}":{}"#, string(text)));
    }
    if !content.is_empty() {
        parts.push(format!(r#""content":{}"#, string(content)));
    }
    format!("{{{}}}", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(reshape: &mut Reshape, text: &str, finish: &str) -> serde_json::Value {
        let json = format!(
            r#"{{"id":"cmpl-2","object":"text_completion","created":9,"model":"m","choices":[{{"index":0,"text":{},"logprobs":null,"finish_reason":{finish},"stop_reason":null,"prompt_token_ids":null,"token_ids":[5]}}],"usage":null}}"#,
            serde_json::to_string(text).expect("string")
        );
        let out = reshape
            .chat_chunk(json.as_bytes())
            .expect("a completion chunk");
        serde_json::from_slice(&out).expect("JSON")
    }

    #[test]
    fn reasoning_runs_to_the_marker_even_split_across_chunks() {
        let mut reshape = Reshape::new(Some("reasoning"));
        let first = chat(&mut reshape, " so 4.</th", "null");
        assert_eq!(first["object"], "chat.completion.chunk");
        assert_eq!(
            first["choices"][0]["delta"],
            serde_json::json!({"reasoning": " so 4."})
        );
        assert_eq!(first["choices"][0]["token_ids"], serde_json::json!([5]));
        let second = chat(&mut reshape, "ink>\n\nIt is", "null");
        assert_eq!(
            second["choices"][0]["delta"],
            serde_json::json!({"content": "\n\nIt is"})
        );
        let last = chat(&mut reshape, " 4.", r#""stop""#);
        assert_eq!(last["choices"][0]["delta"]["content"], " 4.");
        assert_eq!(
            (
                &last["choices"][0]["finish_reason"],
                &last["choices"][0]["stop_reason"]
            ),
            (&serde_json::json!("stop"), &serde_json::Value::Null)
        );
    }

    #[test]
    fn content_stays_content_and_a_usage_chunk_keeps_its_usage() {
        let mut reshape = Reshape::new(None);
        assert_eq!(
            chat(&mut reshape, "</think>x", "null")["choices"][0]["delta"],
            serde_json::json!({"content": "</think>x"})
        );
        let usage = br#"{"id":"cmpl-2","object":"text_completion","created":9,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#;
        let out = reshape.chat_chunk(usage).expect("a completion chunk");
        assert_eq!(
            std::str::from_utf8(&out).expect("utf-8"),
            r#"{"id":"cmpl-2","object":"chat.completion.chunk","created":9,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#
        );
        assert_eq!(reshape.chat_chunk(b"[DONE]"), None);
    }
}
