//! Reasoning models, end to end on the tiny random Qwen3 checkpoint (scripts/checkpoints/)
//! served with a reasoning chat template: `chat_template_kwargs` reach the template
//! (`enable_thinking: false` adds Qwen3's empty think block to the prompt), and with a template
//! that opens `<think>` in the generation prompt (DeepSeek-R1's parser, chosen from the
//! template) the output arrives in `reasoning_content`, whole and streamed alike, its tokens
//! counted as reasoning; `--reasoning-parser none` leaves it all in `content`. The streamed
//! and whole answers are checked through the official `openai` client too
//! (scripts/reasoning_check.py).

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
async fn chat_template_kwargs_reach_the_template_and_grammars_wait_for_thinking_off() {
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

    let json_object = json!({"response_format": {"type": "json_object"}});
    let reply = post_json(addr, "/v1/chat/completions", &chat(json_object.clone())).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    let error = &reply.json()["error"];
    assert_eq!(error["param"], "response_format");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("would constrain the reasoning"),
        "{error}"
    );
    let tool =
        json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
    let required = json!({"tools": [tool], "tool_choice": "required"});
    let reply = post_json(addr, "/v1/chat/completions", &chat(required)).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["param"], "tool_choice");
    let mut thinking_off = chat(json_object);
    thinking_off["chat_template_kwargs"] = json!({"enable_thinking": false});
    // A grammar decides where the output ends.
    thinking_off["ignore_eos"] = json!(false);
    let reply = post_json(addr, "/v1/chat/completions", &thinking_off).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
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
