//! Exact failover on vLLM through the whole gateway: a replica (its `/metrics` names vLLM) is
//! asked for token ids, breaks midway through a reasoning chat, and a second replica continues
//! it as a completion of the rendered prompt's ids plus the answer's; the client reads the
//! unbroken answer (reasoning once, content, usage counted once), without the ids. The two
//! replicas answer with the streams of `gateway/tests/fixtures/vllm/`.

use std::sync::atomic::Ordering;

use crate::support::*;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/vllm/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The joined `member` of every chunk's first choice delta.
fn joined(chunks: &[serde_json::Value], member: &str) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"][member].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vllm_chat_broken_while_reasoning_ends_on_another_replica_exactly() {
    let whole = fixture("chat-reasoning.sse");
    // The first replica sends the role chunk, `<think>` and three reasoning tokens, then ends.
    let broken: String = whole.split_inclusive("\n\n").take(5).collect();
    let (first, second) = (MockReplica::start().await, MockReplica::start().await);
    *first.state.canned.lock().expect("canned") = Some((200, "text/event-stream", broken));
    *second.state.canned.lock().expect("canned") = Some((
        200,
        "text/event-stream",
        fixture("chat-reasoning-continued.sse"),
    ));
    // The second is not ready until the first has the request.
    second.state.unhealthy.store(true, Ordering::SeqCst);
    let (running, client) = gateway(&config(&[&first, &second], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    // Scraped too: its metrics say vLLM, so it is asked for token ids.
    for _ in 0..200 {
        if series(
            &client,
            &format!(
                "tokenscale_gateway_replica_requests_waiting{{model_name=\"m\",replica=\"{}\"}}",
                first.url
            ),
        )
        .await
            != "absent"
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }

    let request = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 64, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let pending = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/chat/completions", Some("key-a"), &request)
                .await
        })
    };
    while first.requests() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    second.state.unhealthy.store(false, Ordering::SeqCst);
    let reply = pending.await.expect("joins");
    assert_eq!(reply.status, 200, "{}", reply.body);

    let asked = first.state.last_body.lock().expect("body").clone();
    assert_eq!(
        asked.map(|b| b["return_token_ids"].clone()),
        Some(serde_json::json!(true))
    );
    let continued = second
        .state
        .last_body
        .lock()
        .expect("body")
        .clone()
        .expect("a continuation");
    let recorded = events(&fixture("chat-reasoning-continued.sse"));
    assert_eq!(
        continued["prompt"],
        recorded[0]["choices"][0]["prompt_token_ids"]
    );
    assert!(continued.get("messages").is_none(), "{continued}");

    let got = events(&reply.body);
    let unbroken = events(&whole);
    for member in ["reasoning_content", "content"] {
        assert_eq!(
            joined(&got, member),
            joined(&unbroken, member),
            "{member}: {}",
            reply.body
        );
    }
    assert_eq!(
        reply.body.matches(r#""role":"assistant""#).count(),
        1,
        "{}",
        reply.body
    );
    assert!(
        got.iter()
            .all(|c| c["id"] == "chatcmpl-4f1d2a" && c["object"] == "chat.completion.chunk"),
        "{}",
        reply.body
    );
    for chunk in &got {
        let choice = &chunk["choices"][0];
        assert!(
            chunk["prompt_token_ids"].is_null() && choice["token_ids"].is_null(),
            "{chunk}"
        );
    }
    let usage = &got.last().expect("chunks")["usage"];
    assert_eq!(
        (
            usage["prompt_tokens"].as_u64(),
            usage["completion_tokens"].as_u64()
        ),
        (Some(15), Some(23))
    );
    assert!(reply.body.ends_with("data: [DONE]\n\n"));
    assert_eq!(
        metric(&client, "tokenscale_gateway_generation_tokens_total").await,
        "23",
        "counted once"
    );
}
