//! Structured outputs and tool calling on the real SmolLM2 model, driven by the official
//! `openai` Python client and checked with `jsonschema` (scripts/structured_outputs_check.py):
//! JSON schemas and JSON mode at temperature 0 and 1, guided choices and regexes, forced and
//! named tool calls, streamed tool-call deltas, a tool-result round trip, and 400s naming the
//! fields this engine does not implement.

mod server_support;

use serde_json::json;
use server_support::client::post_json;
use server_support::{MODEL_NAME, model_config, run_python_check, start_model_server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_client_gets_valid_json_tool_calls_and_named_refusals() {
    let server = start_model_server(model_config(16384)).await;
    let (ok, report) = run_python_check(
        "structured_outputs_check.py",
        &["openai", "jsonschema"],
        server.addr,
    )
    .await;
    println!("{report}");
    assert!(ok, "structured outputs check failed:\n{report}");
    assert!(report.contains("structured outputs ok"), "{report}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_take_guided_fields_and_refuse_unknown_ones() {
    let server = start_model_server(model_config(4096)).await;
    for seed in 0..4 {
        let body = json!({"model": MODEL_NAME, "prompt": "The answer is", "max_tokens": 8,
            "temperature": 1.0, "seed": seed, "guided_choice": ["yes", "no"]});
        let reply = post_json(server.addr, "/v1/completions", &body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let text = reply.json()["choices"][0]["text"].clone();
        assert!(text == "yes" || text == "no", "{text}");
    }
    let unknown = json!({"model": MODEL_NAME, "prompt": "x", "max_tokens": 2, "echo_prompt": true});
    let reply = post_json(server.addr, "/v1/completions", &unknown).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["param"], "echo_prompt");
    let eos = json!({"model": MODEL_NAME, "prompt": "x", "max_tokens": 2, "ignore_eos": true,
        "response_format": {"type": "json_object"}});
    let reply = post_json(server.addr, "/v1/completions", &eos).await;
    assert_eq!(
        reply.json()["error"]["param"],
        "ignore_eos",
        "{}",
        reply.body
    );
    server.stop().await;
}
