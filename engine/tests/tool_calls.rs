//! Tool calls are whole (issue 39): on the real SmolLM2 model, driven by the official `openai`
//! Python client (scripts/tool_calls_check.py), named and required tool choices give exactly
//! one call whose arguments parse, or none when `max_tokens` cuts it, streamed and not, over 30
//! seeds at temperature 1; with `parallel_tool_calls` every call returned parses.

mod server_support;

use server_support::{model_config, run_python_check, start_model_server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_choices_return_one_whole_call_or_none() {
    let server = start_model_server(model_config(16384)).await;
    let (ok, report) = run_python_check("tool_calls_check.py", &["openai"], server.addr).await;
    println!("{report}");
    assert!(ok, "tool calls check failed:\n{report}");
    assert!(report.contains("tool calls whole ok"), "{report}");
    server.stop().await;
}
