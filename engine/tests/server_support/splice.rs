//! Checks that a stream cut after any chunk and resumed with `tokenscale_resume` (as the
//! gateway does when a replica dies) gives exactly the uninterrupted answer.

use std::net::SocketAddr;

use serde_json::{Value, json};
use tokenscale_common::headers::STREAM_TOKEN_IDS;
use tokenscale_common::openai::TOKEN_IDS_MEMBER;

use super::client::post_raw;

/// `POST path` for a stream with token ids: every `data:` payload but `[DONE]`, which must
/// end it.
pub async fn stream_with_ids(addr: SocketAddr, path: &str, body: &Value) -> Vec<Value> {
    let headers = [
        ("content-type", "application/json"),
        (STREAM_TOKEN_IDS, "1"),
    ];
    let reply = post_raw(addr, path, body.to_string(), &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let mut events: Vec<Value> = reply
        .body
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap_or(Value::String(data.into())))
        .collect();
    assert_eq!(events.pop(), Some(json!("[DONE]")), "{}", reply.body);
    events
}

/// The text a chunk adds.
fn text(chunk: &Value) -> String {
    let choice = &chunk["choices"][0];
    choice["text"]
        .as_str()
        .or(choice["delta"]["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn ids(chunk: &Value) -> Vec<u64> {
    chunk[TOKEN_IDS_MEMBER]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// Streams `body` whole, then again cut after each chunk in `cuts` (all when `None`) and
/// resumed from the ids sent so far; the resumed stream must be exactly the rest. Returns
/// the number of chunks carrying tokens.
pub async fn check_every_cut(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    cuts: Option<&[usize]>,
) -> usize {
    let whole = stream_with_ids(addr, path, body).await;
    let usage = whole.last().expect("a usage chunk")["usage"].clone();
    assert!(usage.is_object(), "the body must ask for usage: {whole:?}");
    // The chunks the gateway reads ids from: every one with a choice but the chat role's.
    let token_chunks: Vec<&Value> = whole
        .iter()
        .filter(|c| c["choices"].as_array().is_some_and(|a| !a.is_empty()))
        .filter(|c| c["choices"][0]["delta"]["role"].is_null())
        .collect();
    for chunk in &token_chunks {
        assert!(chunk[TOKEN_IDS_MEMBER].is_array(), "{chunk}");
    }
    let all_ids: Vec<u64> = token_chunks.iter().flat_map(|c| ids(c)).collect();
    let full: String = token_chunks.iter().map(|c| text(c)).collect();
    assert_eq!(
        usage["completion_tokens"].as_u64(),
        Some(all_ids.len() as u64),
        "every output token's id is reported once"
    );
    let finish = token_chunks.last().expect("chunks")["choices"][0]["finish_reason"].clone();
    let every: Vec<usize> = (0..token_chunks.len()).collect();
    for &cut in cuts.unwrap_or(&every) {
        let sent = &token_chunks[..cut.min(token_chunks.len())];
        let sent_ids: Vec<u64> = sent.iter().flat_map(|c| ids(c)).collect();
        let sent_text: String = sent.iter().map(|c| text(c)).collect();
        let mut resumed = body.clone();
        resumed["tokenscale_resume"] = json!({"token_ids": sent_ids});
        let rest = stream_with_ids(addr, path, &resumed).await;
        assert!(
            rest.iter()
                .all(|c| c["choices"][0]["delta"]["role"].is_null()),
            "cut {cut}: no second role chunk"
        );
        let rest_text: String = rest.iter().map(text).collect();
        assert_eq!(
            format!("{sent_text}{rest_text}"),
            full,
            "cut {cut} of {path} {body}"
        );
        let rest_ids: Vec<u64> = rest.iter().flat_map(ids).collect();
        assert_eq!([sent_ids, rest_ids].concat(), all_ids, "cut {cut}");
        let last = rest.last().expect("a usage chunk");
        assert_eq!(
            last["usage"]["completion_tokens"], usage["completion_tokens"],
            "cut {cut}"
        );
        assert_eq!(
            last["usage"]["prompt_tokens"], usage["prompt_tokens"],
            "cut {cut}"
        );
        let rest_finish = rest
            .iter()
            .rev()
            .find(|c| !c["choices"][0]["finish_reason"].is_null())
            .map(|c| c["choices"][0]["finish_reason"].clone());
        assert_eq!(rest_finish, Some(finish.clone()), "cut {cut}");
    }
    token_chunks.len()
}
