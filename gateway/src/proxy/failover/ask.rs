//! What a stream request asks of the replica it goes to, so that a break can be continued
//! exactly (pure: bytes in, bytes out): its generated token ids, in the engine's own terms,
//! only of an engine known to take the field (another could refuse a member it does not know).
//! tokenscale's engine is asked by a header instead, which every other engine ignores.

use bytes::Bytes;
use tokenscale_common::engines::EngineKind;

use super::continuation::{Api, Edits};
use super::splice::Shape;
use crate::json_members::{Member, top_level_members};

/// The body for a replica running `engine` (when known), asking for token ids; `None` when
/// it stays as it is: the engine reports none, the endpoint is not a generation one, or the
/// client set the member itself (then it gets what it asked for, and keeps it).
pub fn ask_token_ids(body: &Bytes, engine: Option<EngineKind>, path: &str) -> Option<Bytes> {
    let api = Api::of_path(path)?;
    let member: &[u8] = match (engine?, api) {
        // `return_token_ids` (vLLM >= 0.10.2): `token_ids` on each choice, and the prompt's
        // ids on the first chunk.
        (EngineKind::Vllm, _) => b"return_token_ids",
        // `verbose`: `__verbose.tokens` on each chunk of a completion. A chat's rendered
        // prompt is not reported, so a chat is not asked.
        (EngineKind::Llamacpp, Api::Completions) => b"verbose",
        _ => return None,
    };
    let [existing] = top_level_members(body, [member])?;
    if existing.is_some() {
        return None;
    }
    let mut edits = Edits::new(body);
    let name = std::str::from_utf8(member).ok()?;
    edits.add(format!(r#""{name}":true"#));
    Some(edits.finish())
}

/// Whether the client asked for token ids itself (then they are not taken out of its chunks).
pub fn client_asks_ids(body: &[u8]) -> bool {
    top_level_members(body, [b"return_token_ids", b"verbose"])
        .is_some_and(|found| found.iter().any(Option::is_some))
}

/// What the request at `api` with `body` asks, as far as continuing it goes.
pub fn shape(body: &[u8], api: Option<Api>) -> Shape {
    let chat = api == Some(Api::Chat);
    let [tools, format, logprobs, echo] =
        top_level_members(body, [b"tools", b"response_format", b"logprobs", b"echo"])
            .unwrap_or_default();
    let set = |m: Option<Member>| {
        m.is_some_and(|m| !matches!(&body[m.value..m.end], b"null" | b"false" | b"[]"))
    };
    Shape {
        chat,
        // A completion's `echo` puts the prompt's ids among the answer's.
        parsed: (chat && (set(tools) || set(format) || set(logprobs))) || set(echo),
        keeps_ids: client_asks_ids(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_vllm_and_llama_server_in_their_terms_and_no_one_else() {
        let body = Bytes::from_static(br#"{"model":"m","prompt":"x","stream":true}"#);
        let ask = |engine, path| ask_token_ids(&body, engine, path).map(|b| b.to_vec());
        assert_eq!(
            ask(Some(EngineKind::Vllm), "/v1/completions"),
            Some(br#"{"return_token_ids":true,"model":"m","prompt":"x","stream":true}"#.to_vec())
        );
        assert_eq!(
            ask(Some(EngineKind::Llamacpp), "/v1/completions"),
            Some(br#"{"verbose":true,"model":"m","prompt":"x","stream":true}"#.to_vec())
        );
        assert_eq!(
            ask(Some(EngineKind::Llamacpp), "/v1/chat/completions"),
            None
        );
        for engine in [None, Some(EngineKind::Sglang), Some(EngineKind::Tokenscale)] {
            assert_eq!(ask(engine, "/v1/completions"), None, "{engine:?}");
        }
        assert_eq!(ask(Some(EngineKind::Vllm), "/v1/embeddings"), None);
        let own = Bytes::from_static(br#"{"return_token_ids":false,"stream":true}"#);
        assert_eq!(
            ask_token_ids(&own, Some(EngineKind::Vllm), "/v1/completions"),
            None
        );
        assert!(client_asks_ids(&own) && !client_asks_ids(&body));
    }

    #[test]
    fn a_chat_with_tools_a_format_or_logprobs_is_parsed_by_its_endpoint() {
        let chat = Some(Api::Chat);
        let plain = br#"{"messages":[],"tools":[],"logprobs":false,"response_format":null}"#;
        assert!(!shape(plain, chat).parsed);
        for body in [
            &br#"{"tools":[{"type":"function"}]}"#[..],
            br#"{"response_format":{"type":"json_object"}}"#,
            br#"{"logprobs":true}"#,
        ] {
            assert!(shape(body, chat).parsed, "{body:?}");
            assert!(!shape(body, Some(Api::Completions)).parsed, "{body:?}");
        }
        let echo = br#"{"prompt":"x","echo":true}"#;
        assert!(shape(echo, Some(Api::Completions)).parsed);
    }
}
