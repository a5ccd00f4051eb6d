//! A request's class in the terms of the engine it goes to: vLLM's and SGLang's integer
//! `priority` member, set in the body (pure: bytes in, bytes out; every other member keeps
//! its bytes). tokenscale's engine reads the `x-tokenscale-priority` header instead.

use bytes::Bytes;
use tokenscale_common::engines::{EngineKind, EnginePriority};

use crate::json_members::{top_level_members, without_member};
use crate::vocab::Priority;

/// The body for a replica of a model whose replicas run `engine` (and, when its scrape told,
/// `scraped`), carrying `class` as the engine's `priority`, or, for another engine than ours
/// that takes none, without a class name the client wrote there (vLLM and SGLang refuse a
/// string `priority`); `None` when the body stays as it is: the replica's metrics name another
/// engine, the path is no generation endpoint, or there is nothing to change.
pub fn engine_priority_body(
    body: &Bytes,
    path: &str,
    class: Priority,
    engine: (EngineKind, EnginePriority),
    scraped: Option<EngineKind>,
) -> Option<Bytes> {
    let (kind, priority) = engine;
    if scraped.is_some_and(|scraped| scraped != kind) || !path.ends_with("/completions") {
        return None;
    }
    match priority.body_priority(class) {
        Some(value) => with_priority(body, value),
        None if kind != EngineKind::Tokenscale => without_class_name(body),
        None => None,
    }
}

/// `body` without a top-level `priority` whose value is a string (the gateway's class name,
/// already read); `None` when it has none.
fn without_class_name(body: &[u8]) -> Option<Bytes> {
    let [member] = top_level_members(body, [b"priority"])?;
    let member = member.filter(|m| body[m.value] == b'"')?;
    Some(Bytes::from(without_member(body, member)))
}

/// `body` with its top-level `priority` set to `value`: the client's value replaced in place
/// (the last of duplicates, the one a JSON reader keeps), else the member inserted after the
/// opening brace. `None` when the body is already so, or is not one object whose keys the
/// scan reads (escaped keys): then the engine gets the client's bytes.
pub fn with_priority(body: &[u8], value: i64) -> Option<Bytes> {
    let [found] = top_level_members(body, [b"priority"])?;
    let text = value.to_string();
    let (start, end, piece) = match found {
        Some(member) if &body[member.value..member.end] == text.as_bytes() => return None,
        Some(member) => (member.value, member.end, text),
        None => {
            let brace = body.iter().position(|&b| b == b'{')?;
            let rest = &body[brace + 1..];
            // No comma after the member when it is the only one.
            let comma = if rest.trim_ascii_start().starts_with(b"}") {
                ""
            } else {
                ","
            };
            let member = format!(r#""priority":{text}{comma}"#);
            (brace + 1, brace + 1, member)
        }
    };
    let mut out = Vec::with_capacity(body.len() + piece.len());
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(piece.as_bytes());
    out.extend_from_slice(&body[end..]);
    Some(Bytes::from(out))
}

#[cfg(test)]
#[path = "priority_field_tests.rs"]
mod tests;
