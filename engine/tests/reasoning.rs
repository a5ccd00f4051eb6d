//! Reasoning models, end to end on the tiny random Qwen3 checkpoint (scripts/checkpoints/)
//! served with a reasoning chat template: `chat_template_kwargs` reach the template
//! (`enable_thinking: false` adds Qwen3's empty think block to the prompt), and with a template
//! that opens `<think>` in the generation prompt (DeepSeek-R1's parser, chosen from the
//! template) the output arrives in `reasoning_content`, whole and streamed alike, its tokens
//! counted as reasoning; `--reasoning-parser none` leaves it all in `content`. The streamed
//! and whole answers are checked through the official `openai` client too
//! (scripts/reasoning_check.py). A JSON schema and a named tool choice apply after the
//! reasoning (its end forced by `thinking_token_budget`: random weights never write `</think>`).

#![allow(clippy::unwrap_used)]

mod checkpoints_support;
mod server_support;

use std::path::Path;
use std::process::Command;

use checkpoints_support::tiny_models;
use serde_json::{Value, json};
use server_support::client::{post_json, post_stream};
use server_support::{EngineProcess, MODEL_NAME, run_python_check, spawn_ready};
use tokenscale_scratch::{Scratch, scratch};

const BIN: &str = env!("CARGO_BIN_EXE_tokenscale-engine");

/// ChatML turns, then Qwen3's generation prompt: with `enable_thinking` false, an empty think
/// block tells the model to answer at once.
const QWEN3_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] \
    + '\\n' + message['content'].split('</think>')[-1] + '<|im_end|>\\n' }}{% endfor %}\
    {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}\
    {% if enable_thinking is defined and enable_thinking is false %}\
    {{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}";

/// DeepSeek-R1's shape: the generation prompt opens `<think>`, the model starts inside it.
const R1_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] \
    + '\\n' + message['content'].split('</think>')[-1] + '<|im_end|>\\n' }}{% endfor %}\
    {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}";

/// The tiny Qwen3 checkpoint with `template` as its chat template (its other files linked).
fn checkpoint(label: &str, template: &str) -> Scratch {
    let dir = scratch!(label);
    let source = tiny_models().join("qwen3");
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "tokenizer_config.json" {
            std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
        }
    }
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(source.join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    let mut config = config.as_object().unwrap().clone();
    config.insert("chat_template".into(), template.into());
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::to_string(&config).unwrap(),
    )
    .unwrap();
    dir
}

/// Raises the copy's context to `positions` (the tiny model's 128 cannot hold a prompt that
/// lists tools, one token per byte; its random weights do not depend on the length).
fn widen_context(dir: &Path, positions: u64) {
    let path = dir.join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["max_position_embeddings"] = json!(positions);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
}

async fn serve(model: &Path, extra: &[&str]) -> (EngineProcess, std::net::SocketAddr) {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--backend", "cpu", "--port", "0"])
        .args(["--served-model-name", MODEL_NAME])
        .arg("--model")
        .arg(model)
        .args(extra);
    spawn_ready(&mut command).await
}

fn chat(extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 16,
        "temperature": 0,
        "ignore_eos": true,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_template_kwargs_reach_the_template() {
    let model = checkpoint("reasoning-qwen3", QWEN3_TEMPLATE);
    let (_engine, addr) = serve(model.path(), &[]).await;
    let usage = |reply: &server_support::client::Reply| {
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()["usage"].clone()
    };
    let default = usage(&post_json(addr, "/v1/chat/completions", &chat(json!({}))).await);
    let on = json!({"chat_template_kwargs": {"enable_thinking": true}});
    let on = usage(&post_json(addr, "/v1/chat/completions", &chat(on)).await);
    let off = json!({"chat_template_kwargs": {"enable_thinking": false}});
    let off = usage(&post_json(addr, "/v1/chat/completions", &chat(off)).await);
    assert_eq!(default["prompt_tokens"], on["prompt_tokens"]);
    // "<think>\n\n</think>\n\n": 19 bytes, one token each in the tiny byte-level vocabulary.
    assert_eq!(
        off["prompt_tokens"].as_u64().unwrap(),
        on["prompt_tokens"].as_u64().unwrap() + 19
    );
    // The template is Qwen3's: its parser runs (an output that does not open `<think>` is all
    // content), and counts reasoning tokens; thinking off turns it off.
    assert_eq!(on["completion_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(off.get("completion_tokens_details"), None);

    for (kwargs, says) in [
        (json!("enable_thinking"), "must be an object"),
        (
            json!({"add_generation_prompt": false}),
            "may not set \"add_generation_prompt\"",
        ),
    ] {
        let reply = post_json(
            addr,
            "/v1/chat/completions",
            &chat(json!({"chat_template_kwargs": kwargs})),
        )
        .await;
        assert_eq!(reply.status, 400, "{}", reply.body);
        let error = &reply.json()["error"];
        assert_eq!(error["param"], "chat_template_kwargs");
        assert!(error["message"].as_str().unwrap().contains(says), "{error}");
    }

    // A grammar waits for the reasoning (the tests below); a budget needs one.
    let budget = json!({"thinking_token_budget": 4});
    let reply = post_json(addr, "/v1/chat/completions", &chat(budget)).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["param"], "thinking_token_budget");
}

/// The whole answer's message and usage, and the streamed deltas joined: (reasoning, content)
/// and the usage chunk.
async fn whole_and_streamed(addr: std::net::SocketAddr) -> (Value, Value, (String, String), Value) {
    let reply = post_json(addr, "/v1/chat/completions", &chat(json!({}))).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let whole = reply.json();
    let streamed = chat(json!({"stream": true, "stream_options": {"include_usage": true}}));
    let (status, events) = post_stream(addr, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, 200, "{events:?}");
    let (mut reasoning, mut content) = (String::new(), String::new());
    for delta in events.iter().filter_map(|e| e["choices"][0].get("delta")) {
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
        content.push_str(delta["content"].as_str().unwrap_or_default());
    }
    let usage = events
        .iter()
        .rev()
        .find_map(|e| e.get("usage").filter(|u| !u.is_null()))
        .unwrap()
        .clone();
    (
        whole["choices"][0]["message"].clone(),
        whole["usage"].clone(),
        (reasoning, content),
        usage,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_inside_the_think_block_is_reasoning_whole_and_streamed() {
    let model = checkpoint("reasoning-r1", R1_TEMPLATE);
    let text = {
        let (_engine, addr) = serve(model.path(), &[]).await;
        let (message, usage, streamed, streamed_usage) = whole_and_streamed(addr).await;
        // A random-weight model never writes `</think>`: all of it is reasoning.
        let reasoning = message["reasoning_content"].as_str().unwrap().to_string();
        assert!(!reasoning.is_empty(), "{message}");
        assert_eq!(message["content"], Value::Null, "{message}");
        assert_eq!(streamed, (reasoning.clone(), String::new()));
        for usage in [&usage, &streamed_usage] {
            assert_eq!(usage["completion_tokens"], 16);
            assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 16);
        }
        let (ok, report) = run_python_check("reasoning_check.py", &["openai"], addr).await;
        assert!(ok, "{report}");
        reasoning
    };

    let (_engine, addr) = serve(model.path(), &["--reasoning-parser", "none"]).await;
    let (message, usage, streamed, _) = whole_and_streamed(addr).await;
    assert_eq!(message["content"].as_str(), Some(text.as_str()));
    assert_eq!(message.get("reasoning_content"), None);
    assert_eq!(streamed, (String::new(), text));
    assert_eq!(usage.get("completion_tokens_details"), None);
}

/// The whole answer (message, finish reason, usage) and the streamed deltas joined:
/// (reasoning, content, tool calls' arguments) and the streamed finish reason.
async fn whole_and_streamed_with(
    addr: std::net::SocketAddr,
    body: &Value,
) -> (Value, Value, Value, (String, String, Vec<String>), Value) {
    let reply = post_json(addr, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let whole = reply.json();
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, events) = post_stream(addr, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, 200, "{events:?}");
    let (mut reasoning, mut content, mut calls) = (String::new(), String::new(), Vec::new());
    let mut finish = Value::Null;
    for choice in events.iter().map(|e| &e["choices"][0]) {
        let delta = &choice["delta"];
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
        content.push_str(delta["content"].as_str().unwrap_or_default());
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            calls.resize(calls.len().max(index + 1), String::new());
            calls[index].push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    let choice = &whole["choices"][0];
    (
        choice["message"].clone(),
        choice["finish_reason"].clone(),
        whole["usage"].clone(),
        (reasoning, content, calls),
        finish,
    )
}

/// A small object whose every member is bounded, so a random model completes it.
fn small_schema() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6},
        "n": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["name", "n"], "additionalProperties": false})
}

/// Qwen3's parser, reasoning on: the model reasons freely (its `<think>` forced, as Qwen3
/// opens it itself), and `content` is the schema's JSON. The random weights never write
/// `</think>`: vLLM's `thinking_token_budget` forces it after 6 reasoning tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_schema_applies_after_the_reasoning_whole_and_streamed() {
    let model = checkpoint("reasoning-schema", QWEN3_TEMPLATE);
    let (_engine, addr) = serve(model.path(), &[]).await;
    let format = json!({"type": "json_schema",
        "json_schema": {"name": "small", "schema": small_schema(), "strict": true}});
    for seed in 0..5 {
        let body = chat(
            json!({"response_format": format, "temperature": 1, "seed": seed,
            "ignore_eos": false, "max_tokens": 100, "thinking_token_budget": 6}),
        );
        let (message, finish, usage, streamed, streamed_finish) =
            whole_and_streamed_with(addr, &body).await;
        assert_eq!(finish, "stop", "seed {seed}: {message}");
        let reasoning = message["reasoning_content"].as_str().unwrap();
        assert!(!reasoning.is_empty(), "seed {seed}: {message}");
        let content = message["content"].as_str().unwrap();
        let parsed: Value = serde_json::from_str(content).unwrap();
        let object = parsed.as_object().unwrap();
        assert_eq!(object.len(), 2, "seed {seed}: {content}");
        assert!(object["name"].as_str().unwrap().chars().count() <= 6);
        assert!(
            object["n"].as_u64().unwrap() <= 99,
            "seed {seed}: {content}"
        );
        assert!(
            usage["completion_tokens_details"]["reasoning_tokens"]
                .as_u64()
                .unwrap()
                >= 6
        );
        assert_eq!(
            streamed,
            (reasoning.to_string(), content.to_string(), Vec::new())
        );
        assert_eq!(streamed_finish, finish);
    }

    // Without a budget the random model never ends its reasoning: `max_tokens` runs out
    // inside it, and the answer is `length` with no content.
    let body = chat(
        json!({"response_format": format, "temperature": 1, "seed": 1,
        "ignore_eos": false, "max_tokens": 12}),
    );
    let (message, finish, _, streamed, streamed_finish) =
        whole_and_streamed_with(addr, &body).await;
    assert_eq!(
        (finish, streamed_finish),
        (json!("length"), json!("length"))
    );
    assert_eq!(message["content"], Value::Null, "{message}");
    assert!(!message["reasoning_content"].as_str().unwrap().is_empty());
    assert_eq!(streamed.1, "");
}

/// DeepSeek-R1's parser (the prompt opens `<think>`): a named `tool_choice` gives exactly one
/// whole call after the reasoning, streamed and whole alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_tool_choice_after_the_reasoning_is_one_whole_call() {
    let model = checkpoint("reasoning-tools", R1_TEMPLATE);
    widen_context(model.path(), 1024);
    let (_engine, addr) = serve(model.path(), &[]).await;
    let tool =
        json!({"type": "function", "function": {"name": "pick", "parameters": small_schema()}});
    for seed in 0..5 {
        let body = chat(json!({"tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": "pick"}},
            "temperature": 1, "seed": seed, "ignore_eos": false, "max_tokens": 120,
            "thinking_token_budget": 5}));
        let (message, finish, _, streamed, streamed_finish) =
            whole_and_streamed_with(addr, &body).await;
        assert!(!message["reasoning_content"].as_str().unwrap().is_empty());
        let calls = message["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "seed {seed}: {message}");
        assert_eq!(calls[0]["function"]["name"], "pick");
        let arguments = calls[0]["function"]["arguments"].as_str().unwrap();
        let parsed: Value = serde_json::from_str(arguments).unwrap();
        assert!(
            parsed["n"].as_u64().unwrap() <= 99,
            "seed {seed}: {arguments}"
        );
        assert_eq!(
            streamed,
            (
                message["reasoning_content"].as_str().unwrap().to_string(),
                String::new(),
                vec![arguments.to_string()]
            )
        );
        assert_eq!(streamed_finish, finish);
    }
}
