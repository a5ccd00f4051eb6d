//! The server on the real SmolLM2 model: batching and preemption leave greedy outputs
//! unchanged, shared prefixes come from the cache, disconnects free blocks, streams match
//! plain responses, the official `openai` client works, and the real binary drains on SIGTERM.

mod server_support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use server_support::client::{self, post_json, post_stream};
use server_support::splice::check_every_cut;
use server_support::{
    MODEL_NAME, model_config, model_path, run_python_check, spawn_ready, start_model_server,
};
use tokenscale_common::metrics::engine as m;
use tokenscale_engine::server::ServeConfig;

/// 64 different short prompts.
fn prompts() -> Vec<String> {
    let subjects = [
        "The capital of France",
        "A good breakfast",
        "The ocean",
        "My favourite book",
        "Rust",
        "The moon",
        "Music",
        "A small cat",
    ];
    let verbs = [
        "is",
        "has always been",
        "can be",
        "was once",
        "will be",
        "looks like",
        "sounds like",
        "feels like",
    ];
    subjects
        .iter()
        .flat_map(|s| verbs.iter().map(move |v| format!("{s} {v}")))
        .collect()
}

fn greedy(prompt: &str, max_tokens: usize) -> Value {
    json!({"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
}

async fn texts_concurrently(
    addr: std::net::SocketAddr,
    prompts: &[String],
    max_tokens: usize,
) -> Vec<String> {
    let tasks: Vec<_> = prompts
        .iter()
        .map(|p| {
            let body = greedy(p, max_tokens);
            tokio::spawn(async move {
                let reply = post_json(addr, "/v1/completions", &body).await;
                assert_eq!(reply.status, 200, "{}", reply.body);
                reply.json()["choices"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("request task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_and_preempted_greedy_requests_return_their_solo_outputs() {
    const MAX_TOKENS: usize = 8;
    let prompts = prompts();
    let server = start_model_server(model_config(8192)).await;
    let mut solo = Vec::new();
    for p in &prompts {
        let reply = post_json(server.addr, "/v1/completions", &greedy(p, MAX_TOKENS)).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        solo.push(
            reply.json()["choices"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    let batched = texts_concurrently(server.addr, &prompts, MAX_TOKENS).await;
    for (i, (b, s)) in batched.iter().zip(&solo).enumerate() {
        assert_eq!(b, s, "prompt {i} {:?} differs in a batch of 64", prompts[i]);
    }
    server.stop().await;

    // 24 blocks of 4 tokens for 16 requests of ~14 tokens (4 blocks) each: requests admitted
    // with their prompt's blocks must preempt each other to grow.
    let tiny = start_model_server(ServeConfig {
        block_size: 4,
        ..model_config(96)
    })
    .await;
    let pressured = texts_concurrently(tiny.addr, &prompts[..16], MAX_TOKENS).await;
    for (i, (p, s)) in pressured.iter().zip(&solo).enumerate() {
        assert_eq!(p, s, "prompt {i} {:?} differs under preemption", prompts[i]);
    }
    assert!(
        tiny.metric(m::NUM_PREEMPTIONS_TOTAL).await > 0.0,
        "the tiny pool was meant to force preemption"
    );
    tiny.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_200_token_prefix_is_reused_and_the_output_is_unchanged() {
    let server = start_model_server(model_config(8192)).await;
    // 200 token ids of real text, then two different endings.
    let text = "Once upon a time, in a small village by the sea, there lived an old fisherman who told stories. ".repeat(12);
    let tokenize = json!({"model": MODEL_NAME, "prompt": text, "max_tokens": 1, "logprobs": 0});
    assert_eq!(
        post_json(server.addr, "/v1/completions", &tokenize)
            .await
            .status,
        200
    );
    let file = tokenscale_engine::gguf::GgufFile::open(model_path()).expect("model");
    let tok = tokenscale_engine::tokenizer::Tokenizer::from_gguf(&file).expect("tokenizer");
    let ids = tok.encode(&text, true).expect("encode");
    assert!(ids.len() >= 200);
    let prefix = &ids[..200];
    let with = |tail: &str| -> Vec<u32> {
        prefix
            .iter()
            .copied()
            .chain(tok.encode(tail, false).unwrap_or_default())
            .collect()
    };
    let (a, b) = (with(" The end."), with(" And then the storm came."));
    let body = |p: &Vec<u32>, salt: Option<&str>| {
        let mut v = json!({"model": MODEL_NAME, "prompt": p, "max_tokens": 8, "temperature": 0});
        if let Some(salt) = salt {
            v["cache_salt"] = json!(salt);
        }
        v
    };
    // Reference: `b` under a private salt, so nothing is shared with what follows.
    let reference = post_json(server.addr, "/v1/completions", &body(&b, Some("reference")))
        .await
        .json();
    assert_eq!(
        post_json(server.addr, "/v1/completions", &body(&a, None))
            .await
            .status,
        200
    );
    let hits_before = server.metric(m::PREFIX_CACHE_HITS_TOTAL).await;
    let second = post_json(server.addr, "/v1/completions", &body(&b, None))
        .await
        .json();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(cached >= 192, "cached_tokens = {cached}");
    assert!(server.metric(m::PREFIX_CACHE_HITS_TOTAL).await >= hits_before + 192.0);
    assert_eq!(
        second["choices"][0]["text"],
        reference["choices"][0]["text"]
    );
    assert_eq!(
        reference["usage"]["prompt_tokens_details"]["cached_tokens"],
        0
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_match_plain_responses_and_disconnects_free_blocks() {
    let server = start_model_server(model_config(8192)).await;
    for (path, mut body) in [
        ("/v1/completions", greedy("The capital of France is", 16)),
        (
            "/v1/chat/completions",
            json!({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 16, "temperature": 0}),
        ),
    ] {
        let plain = post_json(server.addr, path, &body).await.json();
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let (status, events) = post_stream(server.addr, path, &body).await;
        assert_eq!(status, 200);
        assert_eq!(events.last(), Some(&json!("[DONE]")));
        let text: String = events
            .iter()
            .flat_map(|e| e["choices"].as_array().cloned().unwrap_or_default())
            .map(|c| {
                c["text"]
                    .as_str()
                    .or(c["delta"]["content"].as_str())
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        let want = plain["choices"][0]["text"]
            .as_str()
            .or(plain["choices"][0]["message"]["content"].as_str());
        assert_eq!(Some(text.as_str()), want, "{path}");
        let usage = &events[events.len() - 2]["usage"];
        let completion = usage["completion_tokens"].as_u64().unwrap_or(0);
        assert!((1..=16).contains(&completion), "{path}: {usage}");
        assert_eq!(
            usage["completion_tokens"],
            plain["usage"]["completion_tokens"]
        );
        assert_eq!(usage["prompt_tokens"], plain["usage"]["prompt_tokens"]);
        assert_eq!(
            usage["total_tokens"].as_u64(),
            Some(usage["prompt_tokens"].as_u64().unwrap_or(0) + completion)
        );
    }

    // Disconnect mid-stream: the blocks come back within a second.
    server
        .wait_metric(m::KV_CACHE_USAGE_PERC, 0.0, Duration::from_secs(1))
        .await;
    let body = json!({"model": MODEL_NAME, "prompt": "Tell me a long story.", "max_tokens": 2000, "ignore_eos": true, "stream": true});
    let response = client::send(
        server.addr,
        "POST",
        "/v1/completions",
        body.to_string().into(),
        &[],
    )
    .await
    .expect("send");
    let mut incoming = response.into_body();
    assert!(client::next_frame(&mut incoming).await.is_some());
    assert!(server.metric(m::KV_CACHE_USAGE_PERC).await > 0.0);
    drop(incoming);
    server
        .wait_metric(m::KV_CACHE_USAGE_PERC, 0.0, Duration::from_secs(1))
        .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_from_its_token_ids_continues_the_answer_exactly() {
    // What the gateway does when a replica dies mid-stream: the same request plus the token
    // ids already sent. Greedy, seeded sampling with penalties, and a chat, each cut early,
    // in the middle and just before the end.
    let server = start_model_server(model_config(8192)).await;
    let usage = json!({"include_usage": true});
    let cases = [
        (
            "/v1/completions",
            json!({"model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 24,
                   "temperature": 0, "stream": true, "stream_options": usage}),
        ),
        (
            "/v1/completions",
            json!({"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 24,
                   "temperature": 0.9, "seed": 5, "frequency_penalty": 0.5, "top_p": 0.95,
                   "ignore_eos": true, "stream": true, "stream_options": usage}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Name three colours."}],
                   "max_tokens": 24, "temperature": 0, "stream": true, "stream_options": usage}),
        ),
    ];
    for (path, body) in &cases {
        let chunks = check_every_cut(server.addr, path, body, Some(&[1, 9])).await;
        check_every_cut(server.addr, path, body, Some(&[chunks - 1])).await;
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_completes_streams_and_chats() {
    let server = start_model_server(model_config(4096)).await;
    let (ok, report) = run_python_check("openai_client_check.py", &["openai"], server.addr).await;
    assert!(ok, "openai client check failed:\n{report}");
    assert!(report.contains("openai client ok"), "{report}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_drains_on_sigterm_and_exits_zero() {
    let model = model_path();
    let (child, addr) = spawn_ready(
        Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"))
            .args(["serve", "--model"])
            .arg(&model)
            .args([
                "--port",
                "0",
                "--kv-cache-tokens",
                "4096",
                "--max-batch-tokens",
                "256",
                "--drain-timeout",
                "30",
            ])
            .args(["--served-model-name", MODEL_NAME]),
    )
    .await;
    let long = json!({"model": MODEL_NAME, "prompt": "Count to fifty:", "max_tokens": 128, "ignore_eos": true, "temperature": 0});
    let running = tokio::spawn(async move { post_json(addr, "/v1/completions", &long).await });
    // SIGTERM while the request runs (a fixed sleep raced it: on a fast machine 48 tokens
    // were done before the signal, the engine had nothing to drain and was already gone).
    let started = Instant::now();
    loop {
        let metrics = client::get(addr, "/metrics")
            .await
            .map(|r| r.body)
            .unwrap_or_default();
        let running_now = metrics
            .lines()
            .find(|l| l.starts_with("vllm:num_requests_running"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
        if running_now >= Some(1.0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the request never ran: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = child.0.id().to_string();
    let kill = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(kill.success());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        client::get(addr, "/health").await.map(|r| r.status),
        Ok(503)
    );
    assert_eq!(
        post_json(addr, "/v1/completions", &greedy("Hi", 2))
            .await
            .status,
        503
    );
    let finished = running.await.expect("running request");
    assert_eq!(finished.status, 200, "{}", finished.body);
    assert_eq!(finished.json()["usage"]["completion_tokens"], 128);
    let status = exit_status(child, Duration::from_secs(30)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exit status {status:?}"
    );
}

/// The engine's exit status, or None when it is still running after `limit`.
async fn exit_status(
    mut child: server_support::EngineProcess,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.0.try_wait().expect("wait") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("join")
}

/// `--shutdown-delay`: after SIGTERM the engine serves as usual for the delay (what a pre-stop
/// sleep gave: clients that have not yet seen the pod leave its Service still get answers),
/// then drains and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_on_for_its_shutdown_delay_then_drains() {
    let model = model_path();
    let (child, addr) = spawn_ready(
        Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"))
            .args(["serve", "--model"])
            .arg(&model)
            .args(["--port", "0", "--kv-cache-tokens", "4096"])
            .args(["--drain-timeout", "10", "--shutdown-delay", "6"])
            .args(["--served-model-name", MODEL_NAME]),
    )
    .await;
    let kill = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Within the delay: still healthy and serving new requests.
    assert_eq!(
        client::get(addr, "/health").await.map(|r| r.status),
        Ok(200)
    );
    let answer = post_json(addr, "/v1/completions", &greedy("Hi", 2)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let status = exit_status(child, Duration::from_secs(60)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exit status {status:?}"
    );
}
