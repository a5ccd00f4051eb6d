//! One upstream stream chunk as the splice reads and rewrites it (pure: no I/O). Only what
//! splicing needs is parsed; the chunk is forwarded as it came, less the engine's token-id
//! member, with another stream's `id` and `created` replaced by the client's after a
//! resumption, and a textual continuation's `usage` corrected.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokenscale_common::openai::TOKEN_IDS_MEMBER;

use super::super::usage::WireUsage;
use crate::json_members::{Member, top_level_members, without_member};
use crate::vocab::Usage;

/// What the splice needs from one `data:` payload.
#[derive(Debug, Default, PartialEq)]
pub struct ChunkView<'a> {
    /// The chunk's choices (none in the usage chunk).
    pub choices: Vec<ChoiceView<'a>>,
    /// Its `usage`, when not null.
    pub usage: Option<Usage>,
    /// Whether it is an error event (`{"error": ...}`).
    pub error: bool,
    /// The engine's generated token ids for this chunk, when it reports them.
    pub token_ids: Option<Vec<u32>>,
    /// Which engine's report `token_ids` came in.
    pub ids_from: Option<IdSource>,
    /// vLLM's prompt token ids (the rendered prompt of a chat), on a stream's first chunk.
    pub prompt_token_ids: Option<Vec<u32>>,
    /// llama-server's count of tokens generated so far in this stream: a token whose text it
    /// held back (an unfinished character) has no chunk, so its id is missing when the ids
    /// received fall short of this.
    pub predicted: Option<u64>,
}

/// The engine extension a chunk's token ids came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdSource {
    /// tokenscale's `tokenscale_token_ids`, for `tokenscale_resume`.
    Tokenscale,
    /// vLLM's `choices[].token_ids` (`return_token_ids`, vLLM >= 0.10.2).
    Vllm,
    /// llama-server's `__verbose.tokens` (the request's `verbose`).
    Llamacpp,
}

/// One choice of a chunk.
#[derive(Debug, Default, PartialEq)]
pub struct ChoiceView<'a> {
    pub index: u64,
    /// Completions `text`, or chat `delta.content`.
    pub text: Option<Cow<'a, str>>,
    /// A chat delta that names the role (the first chunk of a chat stream).
    pub role: bool,
    /// A chat delta with tool calls.
    pub tool_calls: bool,
    /// A chat delta with reasoning text (`reasoning_content`, or vLLM's newer `reasoning`):
    /// generated tokens the user sees before the answer's content.
    pub reasoning: bool,
    /// The member the reasoning text came in, when it did.
    pub reasoning_member: Option<&'static str>,
    /// `finish_reason` is set: the choice is complete.
    pub finish: bool,
}

impl ChoiceView<'_> {
    /// Whether the choice adds text.
    pub fn has_text(&self) -> bool {
        self.text.as_deref().is_some_and(|t| !t.is_empty())
    }
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<WireChoice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default)]
    tokenscale_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    prompt_token_ids: Option<Vec<u32>>,
    #[serde(default, rename = "__verbose")]
    verbose: Option<WireVerbose>,
}

#[derive(Deserialize)]
struct WireVerbose {
    #[serde(default)]
    tokens: Option<Vec<u32>>,
    #[serde(default)]
    tokens_predicted: Option<u64>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default)]
    index: u64,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    finish_reason: Option<IgnoredAny>,
    #[serde(default)]
    token_ids: Option<Vec<u32>>,
    #[serde(default)]
    prompt_token_ids: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(default)]
    role: Option<IgnoredAny>,
    #[serde(default)]
    tool_calls: Option<IgnoredAny>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
}

/// Reads a chunk's JSON; `None` when it is not a JSON object of the expected shape.
pub fn parse(json: &[u8]) -> Option<ChunkView<'_>> {
    let wire: Wire = serde_json::from_slice(json).ok()?;
    let mut vllm_ids: Option<Vec<u32>> = None;
    let mut prompt_token_ids = wire.prompt_token_ids;
    let choices = wire
        .choices
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            if let Some(ids) = c.token_ids {
                vllm_ids.get_or_insert_with(Vec::new).extend(ids);
            }
            prompt_token_ids = prompt_token_ids.take().or(c.prompt_token_ids);
            choice(c.index, c.text, c.delta, c.finish_reason.is_some())
        })
        .collect();
    let verbose = wire.verbose;
    let predicted = verbose.as_ref().and_then(|v| v.tokens_predicted);
    let (token_ids, ids_from) = match (wire.tokenscale_token_ids, vllm_ids, verbose) {
        (Some(ids), _, _) => (Some(ids), Some(IdSource::Tokenscale)),
        (None, Some(ids), _) => (Some(ids), Some(IdSource::Vllm)),
        (
            None,
            None,
            Some(WireVerbose {
                tokens: Some(ids), ..
            }),
        ) => (Some(ids), Some(IdSource::Llamacpp)),
        _ => (None, None),
    };
    Some(ChunkView {
        choices,
        usage: wire.usage.map(Usage::from),
        error: wire.error.is_some(),
        token_ids,
        ids_from,
        prompt_token_ids,
        predicted,
    })
}

fn choice<'a>(
    index: u64,
    text: Option<Cow<'a, str>>,
    delta: Option<WireDelta<'a>>,
    finish: bool,
) -> ChoiceView<'a> {
    let Some(d) = delta else {
        return ChoiceView {
            index,
            text,
            finish,
            ..ChoiceView::default()
        };
    };
    let non_empty = |r: &Option<Cow<str>>| r.as_deref().is_some_and(|r| !r.is_empty());
    let reasoning_member = if non_empty(&d.reasoning_content) {
        Some("reasoning_content")
    } else if non_empty(&d.reasoning) {
        Some("reasoning")
    } else {
        None
    };
    ChoiceView {
        index,
        text: text.or(d.content),
        role: d.role.is_some(),
        tool_calls: d.tool_calls.is_some(),
        reasoning: reasoning_member.is_some(),
        reasoning_member,
        finish,
    }
}

/// The `id` and `created` values (raw JSON) of the stream the client sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub id: Vec<u8>,
    pub created: Vec<u8>,
}

/// Reads the head of a chunk (`None` when it has neither member).
pub fn head(json: &[u8]) -> Option<Head> {
    let [id, created] = top_level_members(json, [b"id", b"created"])?;
    let raw = |m: Option<Member>| m.map(|m| json[m.value..m.end].to_vec()).unwrap_or_default();
    (id.is_some() || created.is_some()).then(|| Head {
        id: raw(id),
        created: raw(created),
    })
}

/// How to rewrite a chunk for the client.
#[derive(Debug, Default)]
pub struct Edit<'a> {
    /// Take out the token ids the gateway asked this engine for, as the engine writes a
    /// chunk when not asked: tokenscale's member and llama-server's `__verbose` cut, vLLM's
    /// members `null`.
    pub strip_ids: Option<IdSource>,
    /// Give the chunk this head (after a resumption).
    pub head: Option<&'a Head>,
    /// Replace the chunk's `usage` (a textual continuation's, corrected).
    pub usage: Option<Usage>,
    /// Set the chunk's `usage` to `null`: the gateway asked for it, the client did not.
    pub hide_usage: bool,
}

impl Edit<'_> {
    /// Whether the edit changes nothing.
    pub fn is_empty(&self) -> bool {
        self.strip_ids.is_none() && self.head.is_none() && self.usage.is_none() && !self.hide_usage
    }
}

/// `json` rewritten by `edit`; `None` when it is not an object (then it goes on unchanged).
pub fn rewrite(json: &[u8], edit: &Edit) -> Option<Vec<u8>> {
    let members = top_level_members(
        json,
        [
            TOKEN_IDS_MEMBER.as_bytes(),
            b"id",
            b"created",
            b"usage",
            b"__verbose",
            b"prompt_token_ids",
            b"choices",
        ],
    )?;
    let [ids, id, created, usage, verbose, prompt_ids, choices] = members;
    let usage_json = edit.usage.map(usage_json);
    // (member, replacement value; `None` cuts the member), applied from the last one back so
    // that the earlier members' offsets stay valid.
    let mut edits: Vec<(Member, Option<&[u8]>)> = Vec::new();
    match edit.strip_ids {
        Some(IdSource::Tokenscale) => edits.extend(ids.map(|m| (m, None))),
        Some(IdSource::Llamacpp) => edits.extend(verbose.map(|m| (m, None))),
        Some(IdSource::Vllm) => {
            let nested = choices
                .map(|m| choice_id_members(json, m))
                .unwrap_or_default();
            let members = prompt_ids.into_iter().chain(nested);
            edits.extend(members.map(|m| (m, Some(&b"null"[..]))));
        }
        None => {}
    }
    if let Some(head) = edit.head {
        edits.extend(
            id.filter(|_| !head.id.is_empty())
                .map(|m| (m, Some(&head.id[..]))),
        );
        let created_value = Some(&head.created[..]).filter(|c| !c.is_empty());
        edits.extend(created.zip(created_value).map(|(m, v)| (m, Some(v))));
    }
    if let (true, Some(m)) = (edit.hide_usage, usage) {
        edits.push((m, Some(b"null")));
    } else if let (Some(m), Some(value)) = (usage, &usage_json) {
        edits.push((m, Some(value.as_bytes())));
    }
    edits.sort_by_key(|(m, _)| std::cmp::Reverse(m.key));
    let mut out = json.to_vec();
    for (member, value) in edits {
        match value {
            None => out = without_member(&out, member),
            Some(value) => {
                out.splice(member.value..member.end, value.iter().copied());
            }
        }
    }
    Some(out)
}

/// vLLM's `token_ids` and `prompt_token_ids` members of each choice in the `choices` member.
fn choice_id_members(json: &[u8], choices: Member) -> Vec<Member> {
    let Ok(list) = serde_json::from_slice::<Vec<&RawValue>>(&json[choices.value..choices.end])
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for choice in list {
        // The choice's offset in `json`: serde borrowed it from there.
        let at = choice.get().as_ptr() as usize - json.as_ptr() as usize;
        let found = top_level_members(choice.get().as_bytes(), [b"token_ids", b"prompt_token_ids"]);
        out.extend(found.into_iter().flatten().flatten().map(|m| Member {
            key: m.key + at,
            value: m.value + at,
            end: m.end + at,
        }));
    }
    out
}

/// The OpenAI `usage` object for `usage`.
fn usage_json(usage: Usage) -> String {
    format!(
        r#"{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}}}}"#,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.prompt_tokens + usage.completion_tokens,
        usage.cached_tokens
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_shapes_and_the_token_ids() {
        let completion = br#"{"id":"cmpl-1","choices":[{"index":0,"text":"Hi","logprobs":null,"finish_reason":null}],"usage":null,"tokenscale_token_ids":[5,6]}"#;
        let view = parse(completion).expect("parses");
        assert_eq!(view.token_ids, Some(vec![5, 6]));
        assert_eq!(view.choices[0].text.as_deref(), Some("Hi"));
        assert!(!view.choices[0].finish && view.usage.is_none() && !view.error);
        let chat =
            br#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        let view = parse(chat).expect("parses");
        assert!(view.choices[0].role && !view.choices[0].has_text());
        let last =
            br#"{"choices":[{"index":1,"delta":{"content":"\u00e9"},"finish_reason":"stop"}]}"#;
        let view = parse(last).expect("parses");
        assert_eq!(view.choices[0].text.as_deref(), Some("é"));
        assert!(view.choices[0].finish && view.choices[0].index == 1);
        let usage = br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#;
        assert_eq!(
            parse(usage)
                .and_then(|v| v.usage)
                .map(|u| u.completion_tokens),
            Some(4)
        );
        assert!(parse(br#"{"error":{"message":"x"}}"#).is_some_and(|v| v.error));
        assert_eq!(parse(b"[1]"), None);
    }

    #[test]
    fn rewrites_strip_ids_set_the_head_and_correct_usage() {
        let json = br#"{"id":"b","object":"x","created":2,"choices":[],"usage":{"prompt_tokens":9},"tokenscale_token_ids":[1]}"#;
        let head = Head {
            id: br#""a""#.to_vec(),
            created: b"1".to_vec(),
        };
        let edit = Edit {
            strip_ids: Some(IdSource::Tokenscale),
            head: Some(&head),
            usage: Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 6,
                cached_tokens: 0,
            }),
            hide_usage: false,
        };
        let out = rewrite(json, &edit).expect("object");
        assert_eq!(
            std::str::from_utf8(&out).expect("utf-8"),
            r#"{"id":"a","object":"x","created":1,"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0}}}"#
        );
        let plain = rewrite(br#"{"id":"b","choices":[]}"#, &Edit::default()).expect("object");
        assert_eq!(plain, br#"{"id":"b","choices":[]}"#);
        let hidden = Edit {
            hide_usage: true,
            ..Edit::default()
        };
        let last = br#"{"id":"b","choices":[{"index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":9}}"#;
        assert_eq!(
            rewrite(last, &hidden).expect("object"),
            br#"{"id":"b","choices":[{"index":0,"finish_reason":"length"}],"usage":null}"#
        );
        assert_eq!(super::head(json).map(|h| h.id), Some(br#""b""#.to_vec()));
    }
}
