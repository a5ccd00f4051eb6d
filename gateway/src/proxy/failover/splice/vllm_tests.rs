//! The splice against vLLM's streams with token ids (`gateway/tests/fixtures/vllm/`): an
//! answer broken midway and continued from its token ids reads, for the client, exactly as
//! the unbroken one (text, reasoning shown once, one role chunk, usage counted once), and
//! without the members the gateway asked for.

use bytes::Bytes;

use super::super::continuation::{self, Api};
use super::tests::run;
use super::*;

/// The events of a fixture stream.
fn fixture(name: &str) -> Vec<(Bytes, usize)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/vllm/");
    let text =
        std::fs::read_to_string(format!("{root}{name}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    text.split_inclusive("\n\n")
        .map(|e| (Bytes::from(e.to_string()), e.len() - 2))
        .collect()
}

/// The JSON chunks of a client stream.
fn chunks(stream: &str) -> Vec<serde_json::Value> {
    stream
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

/// Everything in `stream` under a choice's `member` (`text`, or a delta member), joined.
fn joined(stream: &str, member: &str) -> String {
    let choice = |v: &serde_json::Value| {
        let c = &v["choices"][0];
        c[member]
            .as_str()
            .or(c["delta"][member].as_str())
            .map(str::to_string)
    };
    chunks(stream).iter().filter_map(choice).collect()
}

/// Every engine-id member a client chunk carries, non-null: there must be none.
fn ids_left(stream: &str) -> Vec<String> {
    let mut left = Vec::new();
    for chunk in chunks(stream) {
        let choice = &chunk["choices"][0];
        for value in [
            &chunk["prompt_token_ids"],
            &choice["token_ids"],
            &choice["prompt_token_ids"],
        ] {
            if !value.is_null() {
                left.push(chunk.to_string());
            }
        }
    }
    left
}

fn chat_shape() -> Shape {
    Shape {
        chat: true,
        ..Shape::default()
    }
}

#[test]
fn a_vllm_chat_broken_while_reasoning_continues_as_a_completion_shown_and_counted_once() {
    let whole = fixture("chat-reasoning.sse");
    let (unbroken, want_usage) = run(
        &mut Splice::new(true).with_shape(chat_shape()),
        &whole,
        usize::MAX,
    );
    assert!(ids_left(&unbroken).is_empty(), "{:?}", ids_left(&unbroken));
    // As vLLM writes a chunk when not asked for ids: the members are there, null.
    assert!(
        unbroken.contains(r#""prompt_token_ids":null"#),
        "{unbroken}"
    );
    // Broken after the role chunk, `<think>` and three reasoning tokens.
    let mut splice = Splice::new(true).with_shape(chat_shape());
    let (mut client, _) = run(&mut splice, &whole, 5);
    assert_eq!(splice.plan(true), Plan::Resume(Continuation::Exact));
    let request = br#"{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"What is 2+2?"}],"max_tokens":64,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
    let next = continuation::body(
        &Bytes::from_static(request),
        Api::Chat,
        Continuation::Exact,
        &splice,
    )
    .expect("continues");
    assert_eq!(next.api, Api::Completions);
    let body: serde_json::Value = serde_json::from_slice(&next.body).expect("JSON");
    let prompt: Vec<u32> = serde_json::from_value(body["prompt"].clone()).expect("ids");
    let continued = fixture("chat-reasoning-continued.sse");
    let first = std::str::from_utf8(&continued[0].0).expect("utf-8");
    let asked = chunks(first)[0]["choices"][0]["prompt_token_ids"].clone();
    assert_eq!(
        serde_json::json!(prompt),
        asked,
        "the continuation's prompt is the recorded one"
    );
    assert_eq!(
        (body["max_tokens"].as_u64(), body.get("messages")),
        (Some(60), None)
    );
    splice.resumed(Continuation::Exact);
    let (more, usage) = run(&mut splice, &continued, usize::MAX);
    client.push_str(&more);
    for member in ["reasoning_content", "content"] {
        assert_eq!(
            joined(&client, member),
            joined(&unbroken, member),
            "{member}"
        );
    }
    assert_eq!(joined(&client, "reasoning_content"), "\nOkay, 2+2 is 4.\n");
    assert_eq!(joined(&client, "content"), "\n\n2+2 = 4.");
    assert_eq!(usage, want_usage, "the first replica's tokens counted once");
    assert_eq!(
        usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
        Some((15, 23))
    );
    let all = chunks(&client);
    assert!(
        all.iter()
            .all(|c| c["id"] == "chatcmpl-4f1d2a" && c["object"] == "chat.completion.chunk")
    );
    assert_one_chat_stream(&client, "one break");
    assert_eq!(client.matches("[DONE]").count(), 1);
}

/// A chat stream as one engine would write it: one role chunk, one finish, no ids left.
fn assert_one_chat_stream(client: &str, label: &str) {
    let count = |what: &str| client.matches(what).count();
    assert_eq!(count(r#""role":"assistant""#), 1, "{label}: {client}");
    assert_eq!(count(r#""finish_reason":"stop""#), 1, "{label}: {client}");
    assert!(
        ids_left(client).is_empty(),
        "{label}: {:?}",
        ids_left(client)
    );
}

#[test]
fn a_vllm_completion_continues_from_its_prompt_and_answer_ids_at_every_break() {
    let whole = fixture("completion.sse");
    let (unbroken, want_usage) = run(&mut Splice::new(true), &whole, usize::MAX);
    assert!(ids_left(&unbroken).is_empty(), "{:?}", ids_left(&unbroken));
    assert_eq!(joined(&unbroken, "text"), " Paris. It is the largest city.");
    let request = Bytes::from_static(br#"{"model":"Qwen/Qwen3-0.6B","prompt":"The capital of France is","max_tokens":8,"temperature":0,"stream":true}"#);
    let continued = fixture("completion-continued.sse");
    let mut splice = Splice::new(true);
    let (mut client, _) = run(&mut splice, &whole, 3);
    assert_eq!(splice.plan(true), Plan::Resume(Continuation::Exact));
    let next = continuation::body(&request, Api::Completions, Continuation::Exact, &splice)
        .expect("continues");
    let body: serde_json::Value = serde_json::from_slice(&next.body).expect("JSON");
    assert_eq!(
        body["prompt"],
        serde_json::json!([785, 6722, 315, 9625, 374, 12095, 13, 1084])
    );
    assert_eq!(
        (body["max_tokens"].as_u64(), next.api),
        (Some(5), Api::Completions)
    );
    splice.resumed(Continuation::Exact);
    let (more, usage) = run(&mut splice, &continued, usize::MAX);
    client.push_str(&more);
    assert_eq!(joined(&client, "text"), joined(&unbroken, "text"));
    assert_eq!(usage, want_usage);
    assert!(
        chunks(&client)
            .iter()
            .all(|c| c["id"] == "cmpl-0a9e51" && c["created"] == 1764900100)
    );
    assert!(ids_left(&client).is_empty(), "{:?}", ids_left(&client));
    // A client that asked for the ids itself gets them as vLLM sent them.
    let keeps = Shape {
        keeps_ids: true,
        ..Shape::default()
    };
    let (own, _) = run(&mut Splice::new(true).with_shape(keeps), &whole, usize::MAX);
    assert_eq!(
        own,
        whole
            .iter()
            .map(|(b, _)| std::str::from_utf8(b).expect("utf-8"))
            .collect::<String>()
    );
}

#[test]
fn a_vllm_chat_with_tools_or_nothing_seen_yet_is_not_continued_as_a_completion() {
    let whole = fixture("chat-reasoning.sse");
    // Only the role chunk and `<think>` went out: the chat runs again.
    let mut unseen = Splice::new(true).with_shape(chat_shape());
    run(&mut unseen, &whole, 2);
    assert_eq!(unseen.plan(true), Plan::Resume(Continuation::Restart));
    let tools = Shape {
        parsed: true,
        ..chat_shape()
    };
    let mut splice = Splice::new(true).with_shape(tools);
    run(&mut splice, &whole, 5);
    assert_eq!(splice.plan(true), Plan::Resume(Continuation::Textual));
    let call = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]},"logprobs":null,"finish_reason":null,"token_ids":[151657]}]}"#;
    run(&mut splice, &[super::tests::event(call)], 1);
    assert_eq!(splice.plan(true), Plan::Fail("the answer has tool calls"));
}

/// The completion stream vLLM writes for the rest of the recorded chat answer after its first
/// `moved` token ids: each chat chunk's raw text (reasoning, the `</think>` token, content) as
/// a completion chunk with its ids, then the usage of a prompt that now holds those ids.
fn continued_after(whole: &[(Bytes, usize)], moved: u64) -> Vec<(Bytes, usize)> {
    let stream: String = whole
        .iter()
        .map(|(b, _)| std::str::from_utf8(b).expect("utf-8"))
        .collect();
    let mut out = Vec::new();
    let (mut generated, mut skipped) = (0, 0);
    for chunk in chunks(&stream) {
        let choice = &chunk["choices"][0];
        let Some(ids) = choice["token_ids"].as_array() else {
            continue;
        };
        if skipped < moved {
            skipped += ids.len() as u64;
            continue;
        }
        let delta = &choice["delta"];
        let text = delta["reasoning_content"]
            .as_str()
            .or(delta["content"].as_str());
        let text = match (text, choice["token_ids"] == serde_json::json!([151668])) {
            (_, true) => "</think>",
            (Some(text), false) => text,
            (None, false) => "",
        };
        generated += ids.len() as u64;
        let json = serde_json::json!({"id": "cmpl-x", "object": "text_completion", "created": 5, "model": "Qwen/Qwen3-0.6B", "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": choice["finish_reason"], "stop_reason": null, "prompt_token_ids": null, "token_ids": ids}], "usage": null});
        out.push(super::tests::event(&json.to_string()));
    }
    let usage = serde_json::json!({"id": "cmpl-x", "object": "text_completion", "created": 5, "model": "Qwen/Qwen3-0.6B", "choices": [], "usage": {"prompt_tokens": 15 + moved, "total_tokens": 15 + moved + generated, "completion_tokens": generated}});
    out.push(super::tests::event(&usage.to_string()));
    out.push(super::tests::event("[DONE]"));
    out
}

#[test]
fn a_vllm_chat_broken_at_any_event_reads_as_the_unbroken_one() {
    let whole = fixture("chat-reasoning.sse");
    let (unbroken, want_usage) = run(
        &mut Splice::new(true).with_shape(chat_shape()),
        &whole,
        usize::MAX,
    );
    // After the role chunk and up to the finish chunk (later cuts end the stream or wait for
    // usage only).
    let mut exact = 0;
    for cut in 1..whole.len() - 2 {
        let mut splice = Splice::new(true).with_shape(chat_shape());
        let (mut client, _) = run(&mut splice, &whole, cut);
        let Plan::Resume(how) = splice.plan(true) else {
            panic!("cut {cut}: {:?}", splice.plan(true));
        };
        let rest = if how == Continuation::Exact {
            exact += 1;
            continued_after(&whole, splice.resume_ids().len() as u64)
        } else {
            // Nothing the user sees went out: the chat runs again from the start.
            assert_eq!(how, Continuation::Restart, "cut {cut}");
            whole.clone()
        };
        splice.resumed(how);
        let (more, usage) = run(&mut splice, &rest, usize::MAX);
        client.push_str(&more);
        for member in ["reasoning_content", "content"] {
            assert_eq!(
                joined(&client, member),
                joined(&unbroken, member),
                "cut {cut}: {member}"
            );
        }
        assert_eq!(usage, want_usage, "cut {cut}");
        assert_one_chat_stream(&client, &format!("cut {cut}"));
    }
    // Every cut after the first reasoning token (the role and `<think>` alone run again).
    assert_eq!(exact, whole.len() - 5);
}
