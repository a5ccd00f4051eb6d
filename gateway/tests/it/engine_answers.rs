//! The gateway in front of vLLM and SGLang: replicas that answer byte for byte as those
//! engines' OpenAI servers write their answers. Unlike `engines.rs` (captured from a running
//! llama.cpp), these answers are rebuilt from the engines' published sources: the code that
//! serialises each chunk (field order, which nulls are written, where `usage` goes) and client
//! output printed in their issues and docs. Each constant names its sources.
//!
//! What differs from engine to engine, and what the gateway must take as it comes:
//! - vLLM sends its role chunk (`"content":""`) before prefill, carries the last token's text
//!   in the finish chunk, and sends usage (with `prompt_tokens_details.cached_tokens` only under
//!   `--enable-prompt-tokens-details`) in a last chunk with `"choices":[]`.
//! - SGLang (current main) sends a separate finish chunk with an empty delta and a usage chunk
//!   with `"choices":[]` and an extra `reasoning_tokens`.
//! - SGLang 0.4 (`openai_api/adapter.py`), asked for usage, holds back `finish_reason` and
//!   sends it in the same last chunk as the usage: there is no usage-only chunk to drop.

use std::sync::atomic::Ordering;

use crate::support::*;

/// vLLM `POST /v1/chat/completions` with `"stream": true, "max_tokens": 6` and
/// `"stream_options": {"include_usage": true}` (as the gateway asks), the second identical
/// request to a server run with `--enable-prefix-caching --enable-prompt-tokens-details`
/// (16 of 30 prompt tokens cached: one 16-token block).
///
/// Sources: vllm-project/vllm `vllm/entrypoints/openai/serving_chat.py` at
/// 003fe5932dc9e1b331347894d3cbc5ddfe89e9eb (`chat_completion_stream_generator`: the role
/// chunk with `DeltaMessage(role, content="")` and `prompt_token_ids` passed explicitly, every
/// chunk dumped with `exclude_unset=True`, so `logprobs`/`finish_reason`/`token_ids` are written
/// as null and `stop_reason` only on the finish chunk, which carries the last delta; the usage
/// chunk dumped with `exclude_unset=True, exclude_none=True`, `prompt_tokens_details` set only
/// when `enable_prompt_tokens_details` and `num_cached_tokens` is non-zero);
/// `vllm/entrypoints/openai/protocol.py` at 0052bed36509c7a5a2d8e48265334e40cf2f5a0e (field
/// order of `ChatCompletionStreamResponse`, `ChatCompletionResponseStreamChoice`, `UsageInfo`:
/// prompt, total, completion). The same chunk shapes appear in output captured from vLLM
/// servers in vllm-project/vllm-omni pull request 2313 and vllm-project/vllm issue 27572.
const VLLM_STREAM: &str = concat!(
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null,"token_ids":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":null,"token_ids":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"delta":{"content":" How"},"logprobs":null,"finish_reason":null,"token_ids":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"delta":{"content":" can"},"logprobs":null,"finish_reason":null,"token_ids":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"delta":{"content":" I"},"logprobs":null,"finish_reason":null,"token_ids":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"delta":{"content":" help"},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[],"usage":{"prompt_tokens":30,"total_tokens":36,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":16}}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

/// The usage chunk of [`VLLM_STREAM`], as the client that did not ask for it must not see it.
const VLLM_USAGE_EVENT: &str = concat!(
    r#"data: {"id":"chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f","object":"chat.completion.chunk","created":1760445312,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[],"usage":{"prompt_tokens":30,"total_tokens":36,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":16}}}"#,
    "\n\n",
);

/// vLLM `POST /v1/chat/completions` with `"max_tokens": 16`, not streamed; the answer ends at
/// the end-of-turn token (counted in `completion_tokens`), nothing cached.
///
/// Sources: vllm-project/vllm `vllm/entrypoints/openai/serving_chat.py` at
/// 003fe5932dc9e1b331347894d3cbc5ddfe89e9eb (`chat_completion_full_generator`: `stop_reason`,
/// `token_ids`, `prompt_token_ids`, `kv_transfer_params`; `prompt_tokens_details` left None
/// without cached tokens) and the api server's `JSONResponse(content=model_dump())`, which
/// writes every field, nulls included. Byte-shape as in the client output printed in
/// vllm-project/vllm-ascend's Qwen-VL tutorial (docs/source/tutorials, vllm-ascend
/// 0.11.0rc3): `..."tool_calls":[],"reasoning_content":null},"logprobs":null,
/// "finish_reason":"stop","stop_reason":null,"token_ids":null}],"service_tier":null,
/// "system_fingerprint":null,"usage":{...,"prompt_tokens_details":null},"prompt_logprobs":null,
/// "prompt_token_ids":null,"kv_transfer_params":null}`.
const VLLM_ANSWER: &str = r#"{"id":"chatcmpl-8a1b2c3d4e5f40718293a4b5c6d7e8f9","object":"chat.completion","created":1760445330,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":30,"total_tokens":40,"completion_tokens":10,"prompt_tokens_details":null},"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":null}"#;

/// vLLM (0.10 and later) refusing `"max_tokens": 4096` on a 2048-token model (HTTP 400).
///
/// Sources: vllm-project/vllm `vllm/entrypoints/openai/protocol.py` at
/// 0052bed36509c7a5a2d8e48265334e40cf2f5a0e (`ErrorResponse { error: ErrorInfo { message,
/// type, param = None, code } }`, dumped whole); `serving_chat.py` at
/// 003fe5932dc9e1b331347894d3cbc5ddfe89e9eb (a preprocessing `ValueError` becomes
/// `create_error_response(f"{e} {e.__cause__}")`, hence the trailing " None"); the message
/// of `OpenAIServing._validate_input` (`'max_tokens' or 'max_completion_tokens' is too large:
/// ...`), as quoted from vLLM servers in many public reports.
const VLLM_ERROR: &str = r#"{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context length is 2048 tokens and your request has 30 input tokens (4096 > 2048 - 30). None","type":"BadRequestError","param":null,"code":400}}"#;

/// Older vLLM (0.5 to 0.9) refusing the same request: a flat error object.
///
/// Sources: vllm-project/vllm `vllm/entrypoints/openai/serving_engine.py` at
/// 0030b9ffce2b2e8b8e9f04a7b108f5877193cec0 (`create_error_response`: `ErrorResponse(message,
/// type="BadRequestError", code=400)`, whose model then was `object = "error", message, type,
/// param = None, code`; the message of `_validate_prompt_and_tokenize`).
const VLLM_ERROR_FLAT: &str = r#"{"object":"error","message":"This model's maximum context length is 2048 tokens. However, you requested 4126 tokens (30 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;

/// SGLang (current main) `POST /v1/chat/completions` with `"stream": true, "max_tokens": 6`
/// and `"stream_options": {"include_usage": true}`, the second identical request to a server
/// run with `--enable-cache-report` (41 of 42 prompt tokens from the radix cache).
///
/// Sources: sgl-project/sglang `python/sglang/srt/entrypoints/openai/serving_chat.py` at
/// 002897c23becbd522d88b8115a763a21765f978a (`_generate_chat_stream`: the role chunk
/// `build_sse_content(role="assistant", content="")`, content chunks, then a separate finish
/// chunk with `finish_reason` and `matched_stop`, then the usage chunk
/// `ChatCompletionStreamResponse(choices=[], usage=...).model_dump_json()`);
/// `python/sglang/srt/entrypoints/openai/sse_utils.py` at
/// 0671305890f954d76e23532a5adf66f350cb8baf (msgspec structs: a delta omits its None fields,
/// a choice writes `logprobs`, `finish_reason`, `matched_stop` always, a chunk omits a None
/// `usage`); `python/sglang/srt/entrypoints/openai/protocol.py` at
/// 004c82e07d876f6e4a0ad6e15325706b0f478f1a (`UsageInfo`: prompt, total, completion,
/// `prompt_tokens_details`, `reasoning_tokens`; `sglext` dropped when None);
/// `python/sglang/srt/entrypoints/openai/usage_processor.py` at
/// 056c7ec2bdc0f1ddaf4d255a0076501a742c34bc (`cached_tokens` only under
/// `enable_cache_report`, and only when non-zero).
const SGLANG_STREAM: &str = concat!(
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" How"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" can"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" I"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" assist"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length","matched_stop":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":42,"total_tokens":48,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":41},"reasoning_tokens":0}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

/// The usage chunk of [`SGLANG_STREAM`].
const SGLANG_USAGE_EVENT: &str = concat!(
    r#"data: {"id":"chatcmpl-3c9a7e51b2d44f0e8a6b1c2d3e4f5061","object":"chat.completion.chunk","created":1779609667,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":42,"total_tokens":48,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":41},"reasoning_tokens":0}}"#,
    "\n\n",
);

/// SGLang 0.4 (`python/sglang/srt/openai_api/adapter.py`) streaming the same request, asked
/// for usage (as the gateway asks), with `--enable-cache-report`.
///
/// Sources: sgl-project/sglang `python/sglang/srt/openai_api/adapter.py` at
/// 00347ba8216ffdbf717d9110a14bec6a1be4f299 (`v1_chat_completions`: the role chunk
/// `DeltaMessage(role="assistant")`, so `"content":null`; with `include_usage` every content
/// chunk gets `finish_reason` None and no empty delta is sent; the last chunk carries a choice
/// with an empty delta and the `finish_reason` together with the `usage`; every chunk
/// `model_dump_json()` whole, nulls included; `prompt_tokens_details` always set under
/// `enable_cache_report`); `python/sglang/srt/openai_api/protocol.py` at the same commit
/// (`DeltaMessage`: role, content, reasoning_content, tool_calls; the choice's `matched_stop`;
/// `UsageInfo`: prompt, total, completion, details). Ids are the bare 32-hex request id. The
/// same chunk shapes appear in output captured from SGLang servers in sgl-project/sglang's
/// issues (for example the one asking for usage in streams, opened 2025-02-21).
const SGLANG_0_4_STREAM: &str = concat!(
    r#"data: {"id":"a2f5c3e1d7b94c6e8f0a1b2c3d4e5f60","object":"chat.completion.chunk","created":1745312345,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"a2f5c3e1d7b94c6e8f0a1b2c3d4e5f60","object":"chat.completion.chunk","created":1745312345,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":null,"content":"Hello","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"a2f5c3e1d7b94c6e8f0a1b2c3d4e5f60","object":"chat.completion.chunk","created":1745312345,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":null,"content":"!","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"a2f5c3e1d7b94c6e8f0a1b2c3d4e5f60","object":"chat.completion.chunk","created":1745312345,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":null,"content":" How","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"a2f5c3e1d7b94c6e8f0a1b2c3d4e5f60","object":"chat.completion.chunk","created":1745312345,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":null,"content":" can","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"a2f5c3e1d7b94c6e8f0a1b2c3d4e5f60","object":"chat.completion.chunk","created":1745312345,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":null,"content":" I","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"a2f5c3e1d7b94c6e8f0a1b2c3d4e5f60","object":"chat.completion.chunk","created":1745312345,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":null,"content":" assist","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"a2f5c3e1d7b94c6e8f0a1b2c3d4e5f60","object":"chat.completion.chunk","created":1745312345,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"length","matched_stop":null}],"usage":{"prompt_tokens":42,"total_tokens":48,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":41}}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

/// SGLang 0.4 `POST /v1/chat/completions` with `"max_tokens": 16`, not streamed, with
/// `--enable-cache-report`; stopped by Llama 3.1's `<|eot_id|>` (128009, `matched_stop`).
///
/// Sources: sgl-project/sglang `python/sglang/srt/openai_api/adapter.py` and
/// `python/sglang/srt/openai_api/protocol.py` at 00347ba8216ffdbf717d9110a14bec6a1be4f299
/// (`v1_chat_generate_response`: `ChatCompletionResponse` with `ChatMessage(role, content,
/// reasoning_content, tool_calls)`, `matched_stop`, and `prompt_tokens_details =
/// {"cached_tokens": n}` under `cache_report`), returned whole by FastAPI.
const SGLANG_ANSWER: &str = r#"{"id":"0f4e2d6c8b1a4935a7c6e5d4c3b2a190","object":"chat.completion","created":1745312360,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I assist you today?","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":128009}],"usage":{"prompt_tokens":42,"total_tokens":52,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":41}}}"#;

/// SGLang refusing `"max_tokens": 4096` on a 4096-token model (HTTP 400, streamed or not in
/// current main, which starts the generator before answering 200 to report this as a 400).
///
/// Sources: sgl-project/sglang `python/sglang/srt/openai_api/protocol.py` at
/// 00347ba8216ffdbf717d9110a14bec6a1be4f299 and
/// `python/sglang/srt/entrypoints/openai/protocol.py` at
/// 004c82e07d876f6e4a0ad6e15325706b0f478f1a (`ErrorResponse`: `object = "error"`, message,
/// type, `param = None`, code); `python/sglang/srt/openai_api/adapter.py` at 00347ba
/// (`create_error_response`: `ORJSONResponse(content=error.model_dump(), status_code=400)`);
/// `python/sglang/srt/entrypoints/openai/serving_chat.py` at 002897c (`_handle_streaming_request`
/// returns the same error for a stream); the message of
/// `TokenizerManager._validate_one_request` (`python/sglang/srt/managers/tokenizer_manager.py`).
const SGLANG_ERROR: &str = r#"{"object":"error","message":"Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 4138 tokens: 42 tokens from the input messages and 4096 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}"#;

/// The text of every chat delta, in order.
fn content(events: &[serde_json::Value]) -> String {
    events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// `(prompt, generation, cached)` tokens counted on `/metrics`.
async fn counted(client: &TestClient) -> (String, String, String) {
    (
        metric(client, "tokenscale_gateway_prompt_tokens_total").await,
        metric(client, "tokenscale_gateway_generation_tokens_total").await,
        metric(client, "tokenscale_gateway_cached_prompt_tokens_total").await,
    )
}

/// A gateway over one replica that answers every completion request with `answer`.
async fn over(
    status: u16,
    content_type: &'static str,
    answer: &str,
) -> (MockReplica, tokenscale_gateway::RunningGateway, TestClient) {
    let replica = MockReplica::start().await;
    *replica.state.canned.lock().expect("canned") =
        Some((status, content_type, answer.to_string()));
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    (replica, running, client)
}

fn chat(stream: bool, max_tokens: u64) -> serde_json::Value {
    serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "stream": stream, "max_tokens": max_tokens})
}

fn chat_with_usage(max_tokens: u64) -> serde_json::Value {
    let mut body = chat(true, max_tokens);
    body["stream_options"] = serde_json::json!({"include_usage": true});
    body
}

/// Streams `answer` (ending with its `usage_event`) through the gateway twice: to a client
/// that did not ask for usage (the gateway asked the engine itself: the client gets the
/// engine's stream byte for byte less that usage chunk) and to one that did (whole). Returns
/// the first client's events and the client, for the engine-specific checks.
async fn stream_passes_through(
    engine: &str,
    answer: &'static str,
    usage_event: &str,
) -> (
    Vec<serde_json::Value>,
    TestClient,
    tokenscale_gateway::RunningGateway,
) {
    let (replica, running, client) = over(200, "text/event-stream", answer).await;
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &chat(true, 6))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let asked = replica.state.last_body.lock().expect("body").clone();
    assert_eq!(
        asked
            .as_ref()
            .map(|b| b["stream_options"]["include_usage"].clone()),
        Some(serde_json::json!(true)),
        "the gateway asks {engine} for usage itself"
    );
    // Every chunk as the engine wrote it (its id and created included), less the usage chunk
    // the client did not ask for.
    assert_eq!(
        reply.body,
        answer.replace(usage_event, ""),
        "the client's stream is {engine}'s, byte for byte, but for the usage chunk"
    );
    let got = events(&reply.body);
    assert_eq!(got[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(got.iter().all(|e| e.get("usage").is_none()));

    let with_usage = client
        .post("/v1/chat/completions", Some("key-a"), &chat_with_usage(6))
        .await;
    assert_eq!(with_usage.status, 200, "{}", with_usage.body);
    assert_eq!(
        with_usage.body, answer,
        "the client that asked gets it whole"
    );
    (got, client, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_stream_passes_through_without_the_usage_chunk_and_counts_its_usage() {
    let (got, client, _running) =
        stream_passes_through("vLLM", VLLM_STREAM, VLLM_USAGE_EVENT).await;
    assert_eq!(got.len(), 7);
    assert_eq!(got[0]["choices"][0]["delta"]["content"], "");
    // vLLM's finish chunk carries the last token.
    assert_eq!(got[6]["choices"][0]["finish_reason"], "length");
    assert_eq!(content(&got), "Hello! How can I help");
    assert!(
        got.iter()
            .all(|e| e["id"] == "chatcmpl-5d0e8f3b2a6c4b1d9e7f6a5b4c3d2e1f"
                && e["created"] == 1760445312)
    );

    // Both streams counted from vLLM's usage chunk, cached tokens included.
    assert_eq!(
        counted(&client).await,
        ("60".to_string(), "12".to_string(), "32".to_string())
    );
    assert_eq!(series(&client, &usage_source("engine")).await, "2");
    assert_eq!(series(&client, &usage_source("gateway")).await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_answer_and_errors_pass_through_and_count() {
    let (replica, _running, client) = over(200, "application/json", VLLM_ANSWER).await;
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &chat(false, 16))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body, VLLM_ANSWER, "vLLM's answer, byte for byte");
    assert_eq!(
        counted(&client).await,
        ("30".to_string(), "10".to_string(), "0".to_string())
    );
    assert_eq!(series(&client, &usage_source("engine")).await, "1");

    for error in [VLLM_ERROR, VLLM_ERROR_FLAT] {
        *replica.state.canned.lock().expect("canned") =
            Some((400, "application/json", error.to_string()));
        let before = replica.requests();
        let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4096});
        let reply = client
            .post("/v1/chat/completions", Some("key-a"), &body)
            .await;
        assert_eq!(reply.status, 400, "{}", reply.body);
        assert_eq!(reply.body, error, "vLLM's error, byte for byte");
        assert_eq!(
            replica.requests() - before,
            1,
            "a request vLLM refused is not retried"
        );
    }
    assert_eq!(
        metric(&client, "tokenscale_gateway_generation_tokens_total").await,
        "10",
        "refused requests generate nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_stream_passes_through_without_the_usage_chunk_and_counts_its_usage() {
    let (got, client, _running) =
        stream_passes_through("SGLang", SGLANG_STREAM, SGLANG_USAGE_EVENT).await;
    // The role chunk, six tokens, the finish chunk with its empty delta.
    assert_eq!(got.len(), 8);
    assert_eq!(got[7]["choices"][0]["delta"], serde_json::json!({}));
    assert_eq!(got[7]["choices"][0]["finish_reason"], "length");
    assert_eq!(content(&got), "Hello! How can I assist");

    assert_eq!(
        counted(&client).await,
        ("84".to_string(), "12".to_string(), "82".to_string())
    );
    assert_eq!(series(&client, &usage_source("engine")).await, "2");
    assert_eq!(series(&client, &usage_source("gateway")).await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_0_4_finish_reason_sent_with_the_usage_still_reaches_the_client() {
    let (_replica, _running, client) = over(200, "text/event-stream", SGLANG_0_4_STREAM).await;

    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &chat(true, 6))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let got = events(&reply.body);
    // The role chunk (content null), six tokens, and the last chunk: it holds the only
    // finish_reason of the answer, so it cannot be dropped as a usage chunk.
    assert_eq!(got.len(), 8, "{}", reply.body);
    assert_eq!(got[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(content(&got), "Hello! How can I assist");
    assert_eq!(got[7]["choices"][0]["finish_reason"], "length");
    assert!(reply.body.ends_with("data: [DONE]\n\n"));

    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &chat_with_usage(6))
        .await;
    assert_eq!(
        reply.body, SGLANG_0_4_STREAM,
        "the client that asked gets it whole"
    );

    assert_eq!(
        counted(&client).await,
        ("84".to_string(), "12".to_string(), "82".to_string())
    );
    assert_eq!(series(&client, &usage_source("engine")).await, "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_0_4_usage_is_not_shown_to_a_client_that_did_not_ask() {
    let (_replica, _running, client) = over(200, "text/event-stream", SGLANG_0_4_STREAM).await;
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &chat(true, 6))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let got = events(&reply.body);
    // Had the client's own request reached SGLang 0.4, every chunk would say `"usage":null`.
    assert!(
        got.iter().all(|e| e["usage"].is_null()),
        "usage the gateway asked for, shown to a client that did not: {}",
        reply.body
    );
    assert_eq!(
        got.last().expect("events")["choices"][0]["finish_reason"],
        "length"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_answer_and_errors_pass_through_and_count() {
    let (replica, _running, client) = over(200, "application/json", SGLANG_ANSWER).await;
    let reply = client
        .post("/v1/chat/completions", Some("key-a"), &chat(false, 16))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body, SGLANG_ANSWER, "SGLang's answer, byte for byte");
    assert_eq!(reply.json()["choices"][0]["matched_stop"], 128009);
    assert_eq!(
        counted(&client).await,
        ("42".to_string(), "10".to_string(), "41".to_string())
    );

    *replica.state.canned.lock().expect("canned") =
        Some((400, "application/json", SGLANG_ERROR.to_string()));
    // Refused alike whether the client streams or not.
    for stream in [false, true] {
        let before = replica.requests();
        let reply = client
            .post("/v1/chat/completions", Some("key-a"), &chat(stream, 4096))
            .await;
        assert_eq!(reply.status, 400, "{}", reply.body);
        assert_eq!(reply.body, SGLANG_ERROR, "SGLang's error, byte for byte");
        assert_eq!(
            replica.requests() - before,
            1,
            "a request SGLang refused is not retried"
        );
    }
    assert_eq!(
        replica.state.requests.load(Ordering::SeqCst),
        3,
        "one answer, two refusals"
    );
}
