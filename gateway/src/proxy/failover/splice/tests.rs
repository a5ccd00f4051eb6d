//! The splice against streams written here: every break point of an answer, both endpoints,
//! engines with and without token ids.

use bytes::Bytes;

use super::*;

/// One `data:` event.
pub(super) fn event(json: &str) -> (Bytes, usize) {
    let whole = Bytes::from(format!("data: {json}\n\n"));
    let len = whole.len() - 2;
    (whole, len)
}

/// The events of an answer of `n` tokens (`w0 w1 ...`) from token `from` on, as an engine with
/// id `id` writes them; token ids when `ids`, the usage chunk when `usage`.
fn answer(id: &str, n: usize, from: usize, ids: bool, usage: bool) -> Vec<(Bytes, usize)> {
    let ids_member = |list: &str| {
        if ids {
            format!(r#","tokenscale_token_ids":[{list}]"#)
        } else {
            String::new()
        }
    };
    let mut out: Vec<_> = (from..n)
        .map(|i| {
            event(&format!(
                r#"{{"id":"{id}","created":7,"choices":[{{"index":0,"text":"w{i} ","finish_reason":null}}]{}}}"#,
                ids_member(&i.to_string())
            ))
        })
        .collect();
    out.push(event(&format!(
        r#"{{"id":"{id}","created":7,"choices":[{{"index":0,"text":"","finish_reason":"length"}}]{}}}"#,
        ids_member("")
    )));
    if usage {
        out.push(event(&format!(
            r#"{{"id":"{id}","created":7,"choices":[],"usage":{{"prompt_tokens":3,"completion_tokens":{n},"total_tokens":{}}}}}"#,
            n + 3
        )));
    }
    out.push(event("[DONE]"));
    out
}

/// Runs `events` through `splice`; returns what the client got, and whether it broke.
pub(super) fn run(
    splice: &mut Splice,
    events: &[(Bytes, usize)],
    stop_after: usize,
) -> (String, Option<Usage>) {
    let mut out = String::new();
    let mut usage = None;
    for (whole, len) in events.iter().take(stop_after) {
        let (step, seen) = splice.event(whole, *len);
        usage = seen.or(usage);
        if let Step::Forward(bytes) = step {
            out.push_str(std::str::from_utf8(&bytes).expect("utf-8"));
        }
    }
    (out, usage)
}

/// The text of the choices in a client stream.
fn text_of(stream: &str) -> String {
    stream
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn an_exact_continuation_splices_every_break_point_into_the_uninterrupted_answer() {
    const N: usize = 6;
    let whole = answer("cmpl-a", N, 0, true, true);
    let (uninterrupted, want_usage) = run(&mut Splice::new(true), &whole, usize::MAX);
    assert!(
        !uninterrupted.contains("tokenscale_token_ids"),
        "{uninterrupted}"
    );
    for cut in 0..whole.len() - 1 {
        let mut splice = Splice::new(true);
        let (mut client, _) = run(&mut splice, &whole, cut);
        let plan = splice.plan(true);
        if cut >= N + 2 {
            // The finish and the usage went out: only [DONE] was missing.
            assert_eq!(plan, Plan::End, "cut {cut}");
            continue;
        }
        let sent = splice.token_ids().len();
        let expected_plan = if cut == 0 {
            Continuation::Restart
        } else {
            Continuation::Exact
        };
        assert_eq!(plan, Plan::Resume(expected_plan), "cut {cut}");
        splice.resumed(expected_plan);
        // The continuation (another engine, another id) starts right after the ids sent.
        let rest = answer("cmpl-b", N, sent, true, true);
        let (more, usage) = run(&mut splice, &rest, usize::MAX);
        client.push_str(&more);
        assert_eq!(text_of(&client), text_of(&uninterrupted), "cut {cut}");
        assert_eq!(usage, want_usage, "cut {cut}");
        let heads: std::collections::BTreeSet<String> = client
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
            .map(|v| format!("{} {}", v["id"], v["created"]))
            .collect();
        assert_eq!(
            heads.len(),
            1,
            "cut {cut}: one id for the whole stream: {client}"
        );
        assert_eq!(
            client.matches("finish_reason\":\"length").count(),
            1,
            "cut {cut}: {client}"
        );
        assert_eq!(client.matches("[DONE]").count(), 1, "cut {cut}");
    }
}

#[test]
fn a_chat_continuation_sends_no_second_role_chunk() {
    let role = event(
        r#"{"id":"c1","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
    );
    let mut splice = Splice::new(false);
    let (first, _) = run(&mut splice, std::slice::from_ref(&role), 1);
    assert!(first.contains("assistant"));
    // Only the role went out: the request runs again, without its role chunk.
    assert_eq!(splice.plan(true), Plan::Resume(Continuation::Restart));
    splice.resumed(Continuation::Restart);
    let again = event(
        r#"{"id":"c2","created":2,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
    );
    let content = event(
        r#"{"id":"c2","created":2,"choices":[{"index":0,"delta":{"content":"Hi"}}],"tokenscale_token_ids":[9]}"#,
    );
    let (more, _) = run(&mut splice, &[again, content], 2);
    assert_eq!(
        more,
        "data: {\"id\":\"c1\",\"created\":1,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
    );
}

#[test]
fn a_finished_answer_missing_its_usage_resumes_for_it_or_ends() {
    let whole = answer("a", 3, 0, true, true);
    // Cut after the finish chunk, before the usage.
    let mut wants_usage = Splice::new(true);
    run(&mut wants_usage, &whole, 4);
    assert_eq!(wants_usage.plan(true), Plan::Resume(Continuation::Exact));
    wants_usage.resumed(Continuation::Exact);
    // The engine ends at once (max_tokens reached): its finish chunk is a repeat.
    let rest = answer("b", 3, 3, true, true);
    let (more, usage) = run(&mut wants_usage, &rest, usize::MAX);
    assert!(!more.contains("finish_reason"), "{more}");
    assert_eq!(usage.map(|u| u.completion_tokens), Some(3));
    let mut no_usage = Splice::new(false);
    run(&mut no_usage, &whole, 4);
    assert_eq!(no_usage.plan(true), Plan::End);
}

#[test]
fn a_textual_continuation_counts_the_moved_text_as_completion() {
    const N: usize = 5;
    let whole = answer("a", N, 0, false, true);
    let mut splice = Splice::new(true);
    let (mut client, _) = run(&mut splice, &whole, 2);
    assert_eq!(splice.plan(true), Plan::Resume(Continuation::Textual));
    assert_eq!(
        splice.plan(false),
        Plan::Fail("the engine reports no token ids and the request cannot be continued as text")
    );
    assert_eq!((splice.text(), splice.text_chunks()), ("w0 w1 ", 2));
    splice.resumed(Continuation::Textual);
    // The other engine was given the text as prompt: 3 + 2 prompt tokens, 3 generated.
    let rest: Vec<_> = answer("b", N, 2, false, false)
        .into_iter()
        .chain([event(r#"{"id":"b","created":9,"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#)])
        .collect();
    let (more, usage) = run(&mut splice, &rest, usize::MAX);
    client.push_str(&more);
    assert_eq!(text_of(&client), "w0 w1 w2 w3 w4 ");
    assert_eq!(
        usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
        Some((3, 5))
    );
    assert!(
        client.contains(r#""usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8"#),
        "{client}"
    );
}

#[test]
fn usage_is_read_even_when_stripped_and_unsupported_streams_fail() {
    let whole = answer("a", 2, 0, true, true);
    let mut splice = Splice::new(false);
    let (client, usage) = run(&mut splice, &whole, usize::MAX);
    assert!(!client.contains("usage\":{"), "{client}");
    assert_eq!(usage.map(|u| u.completion_tokens), Some(2));
    let two = event(r#"{"choices":[{"index":1,"text":"x"}],"tokenscale_token_ids":[1]}"#);
    let mut several = Splice::new(true);
    run(&mut several, &[two], 1);
    assert_eq!(
        several.plan(true),
        Plan::Fail("the stream has several choices")
    );
    let error = event(r#"{"error":{"message":"engine stopped"}}"#);
    assert_eq!(Splice::new(true).event(&error.0, error.1).0, Step::Broken);
    let comment = (Bytes::from_static(b": ping\n\n"), 6);
    assert_eq!(
        Splice::new(true).event(&comment.0, comment.1).0,
        Step::Forward(comment.0.clone())
    );
}

/// The first generated content, as TTFT counts it: not the role chunk (sent before prefill),
/// but reasoning text (which reasoning models stream before their answer), text or a tool call.
#[test]
fn content_starts_at_reasoning_text_or_a_tool_call_never_the_role_chunk() {
    let cases = [
        (
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Let me"}}]}"#,
            true,
        ),
        (
            r#"{"choices":[{"index":0,"delta":{"reasoning":"Let me"}}]}"#,
            true,
        ),
        (
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
            true,
        ),
        (
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}"#,
            true,
        ),
        (
            r#"{"choices":[{"index":0,"delta":{"content":"","reasoning_content":null}}]}"#,
            false,
        ),
    ];
    for (chunk, content) in cases {
        let mut splice = Splice::new(true);
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        let (whole, len) = event(role);
        splice.event(&whole, len);
        assert!(!splice.has_content(), "the role chunk is not content");
        let (whole, len) = event(chunk);
        splice.event(&whole, len);
        assert_eq!(splice.has_content(), content, "{chunk}");
    }
}
