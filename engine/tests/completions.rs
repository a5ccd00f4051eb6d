//! Completions as OpenAI and vLLM define them (issue 39, item 5), on the real SmolLM2 model at
//! temperature 0: `logit_bias` bans and forces tokens on both routes and refuses bad input by
//! name; `echo` returns the prompt before the completion, with its tokens' logprobs (the first
//! `null`) that agree with the logprobs the same tokens had when they were generated, and
//! `max_tokens: 0` scores a prompt alone. The sampler's own rule (the bias is added before the
//! argmax) is checked on hand-made logits. The same, through the official `openai` client:
//! scripts/completions_check.py.

// In tests an unwrap is an assertion: a failure should stop the test loudly.
#![allow(clippy::unwrap_used)]

mod server_support;

use serde_json::{Value, json};
use server_support::client::post_json;
use server_support::fake::FakeBackend;
use server_support::splice::stream_with_ids;
use server_support::{
    MODEL_NAME, TestServer, model_config, model_path, run_python_check, start_model_server,
};
use tokenscale_common::openai::TOKEN_IDS_MEMBER;
use tokenscale_engine::gguf::GgufFile;
use tokenscale_engine::model::ModelConfig;
use tokenscale_engine::sampling::{Sampler, SamplingParams};
use tokenscale_engine::server::start_engine;
use tokenscale_engine::tokenizer::Tokenizer;

const PROMPT: &str = "The capital of France is";

/// The generated token ids of a greedy streamed request to `path` with `extra` members.
async fn greedy_ids(addr: std::net::SocketAddr, path: &str, extra: Value) -> Vec<u64> {
    let mut body = json!({"model": MODEL_NAME, "max_tokens": 8, "temperature": 0,
        "stream": true});
    if path.ends_with("chat/completions") {
        body["messages"] = json!([{"role": "user", "content": PROMPT}]);
    } else {
        body["prompt"] = json!(PROMPT);
    }
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    stream_with_ids(addr, path, &body)
        .await
        .iter()
        .filter_map(|chunk| chunk[TOKEN_IDS_MEMBER].as_array().cloned())
        .flatten()
        .filter_map(|id| id.as_u64())
        .collect()
}

#[test]
fn the_bias_is_added_before_the_greedy_argmax() {
    let logits = [1.0, 3.0, 2.0, 0.5];
    let pick = |bias: &[(u32, f32)]| {
        let params = SamplingParams {
            logit_bias: bias.iter().copied().collect(),
            logprobs: Some(1),
            ..SamplingParams::greedy()
        };
        Sampler::new(&params, &[]).sample(&logits).unwrap()
    };
    assert_eq!(pick(&[]).token_id, 1);
    assert_eq!(pick(&[(1, -100.0)]).token_id, 2);
    assert_eq!(pick(&[(3, 2.6)]).token_id, 3);
    // Logprobs stay those of the raw logits (vLLM's default), whatever the bias.
    let forced = pick(&[(3, 100.0)]);
    let log_sum_exp = logits.iter().map(|l: &f32| l.exp()).sum::<f32>().ln();
    assert_eq!(forced.token_id, 3);
    assert!((forced.logprob.unwrap() - (0.5 - log_sum_exp)).abs() < 1e-5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logit_bias_bans_and_forces_tokens_and_refuses_bad_input_by_name() {
    let server = start_model_server(model_config(4096)).await;
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let plain = greedy_ids(server.addr, path, json!({})).await;
        assert!(!plain.is_empty(), "{path}: no tokens");
        let top = plain[0];
        let banned = greedy_ids(
            server.addr,
            path,
            json!({"logit_bias": {top.to_string(): -100}}),
        )
        .await;
        assert_ne!(banned, plain, "{path}: banning {top} changed nothing");
        assert!(!banned.contains(&top), "{path}: banned {top} in {banned:?}");
        // A token the greedy answer never picks, forced at every step.
        let forced_id = 28_u64;
        assert!(!plain.contains(&forced_id), "{path}: pick another token");
        let forced = greedy_ids(
            server.addr,
            path,
            json!({"logit_bias": {forced_id.to_string(): 100}}),
        )
        .await;
        assert_eq!(forced, vec![forced_id; 8], "{path}");
        let bad = [
            json!({"1": 101}),
            json!({"1": -100.5}),
            json!({"one": 1}),
            json!({"-3": 1}),
            json!({"49152": 1}),
            json!({"1": "up"}),
            json!([1]),
            Value::Object((0..301).map(|i| (i.to_string(), json!(1))).collect()),
        ];
        for bias in bad {
            let mut body = json!({"model": MODEL_NAME, "max_tokens": 2, "logit_bias": bias});
            if path.ends_with("chat/completions") {
                body["messages"] = json!([{"role": "user", "content": "hi"}]);
            } else {
                body["prompt"] = json!("hi");
            }
            let reply = post_json(server.addr, path, &body).await;
            assert_eq!(reply.status, 400, "{path} {bias}: {}", reply.body);
            let error = &reply.json()["error"];
            assert_eq!(error["param"], "logit_bias", "{path} {bias}: {error}");
            assert!(
                error["message"].as_str().unwrap().contains("logit_bias"),
                "{error}"
            );
        }
    }
    server.stop().await;
}

/// A prompt given as token ids (so scoring it plus its completion reads exactly the tokens
/// that were generated, with no re-tokenisation at the seam).
const PROMPT_IDS: [u32; 6] = [504, 3575, 282, 4649, 314, 253];

/// `POST /v1/completions` that must succeed.
async fn complete(addr: std::net::SocketAddr, body: Value) -> Value {
    let reply = post_json(addr, "/v1/completions", &body).await;
    assert_eq!(reply.status, 200, "{body}: {}", reply.body);
    reply.json()
}

fn floats(values: &Value) -> Vec<Option<f64>> {
    values
        .as_array()
        .unwrap()
        .iter()
        .map(Value::as_f64)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_returns_the_prompt_and_its_logprobs_agree_with_decoding() {
    let server = start_model_server(model_config(4096)).await;
    let addr = server.addr;
    // Echo of a text prompt: the prompt exactly, then the completion; usage unchanged.
    let plain = complete(
        addr,
        json!({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 8,
        "temperature": 0}),
    )
    .await;
    let echoed = complete(
        addr,
        json!({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 8,
        "temperature": 0, "echo": true}),
    )
    .await;
    let completion = plain["choices"][0]["text"].as_str().unwrap();
    assert_eq!(
        echoed["choices"][0]["text"],
        format!("{PROMPT}{completion}")
    );
    assert_eq!(echoed["usage"], plain["usage"]);
    let chunks = stream_with_ids(
        addr,
        "/v1/completions",
        &json!({"model": MODEL_NAME,
        "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "echo": true, "stream": true}),
    )
    .await;
    assert_eq!(
        chunks[0]["choices"][0]["text"], PROMPT,
        "the prompt comes first"
    );
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, format!("{PROMPT}{completion}"));

    // Generate greedily with logprobs, then score prompt + completion with echo alone.
    let generated = complete(
        addr,
        json!({"model": MODEL_NAME, "prompt": PROMPT_IDS,
        "max_tokens": 8, "temperature": 0, "logprobs": 3}),
    )
    .await;
    let ids = greedy_ids(addr, "/v1/completions", json!({"prompt": PROMPT_IDS})).await;
    assert_eq!(ids.len(), 8);
    let all: Vec<u64> = PROMPT_IDS
        .iter()
        .map(|&i| u64::from(i))
        .chain(ids)
        .collect();
    let scored = complete(
        addr,
        json!({"model": MODEL_NAME, "prompt": all, "max_tokens": 0,
        "echo": true, "logprobs": 3}),
    )
    .await;
    let choice = &scored["choices"][0];
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(scored["usage"]["completion_tokens"], 0);
    assert_eq!(scored["usage"]["prompt_tokens"], all.len());
    let lp = &choice["logprobs"];
    let logprobs = floats(&lp["token_logprobs"]);
    assert_eq!(logprobs.len(), all.len(), "one entry per prompt token");
    assert_eq!(logprobs[0], None, "the first prompt token has no logprob");
    assert!(lp["top_logprobs"][0].is_null());
    assert!(logprobs[1..].iter().all(|l| l.is_some_and(|l| l <= 0.0)));
    let decoded = floats(&generated["choices"][0]["logprobs"]["token_logprobs"]);
    let tail = &logprobs[PROMPT_IDS.len()..];
    let worst = decoded
        .iter()
        .zip(tail)
        .map(|(d, p)| (d.unwrap() - p.unwrap()).abs())
        .fold(0.0, f64::max);
    println!("prompt vs decode logprobs: largest difference {worst:.2e}");
    assert!(worst < 1e-2, "prompt {tail:?} vs decode {decoded:?}");
    let gen_lp = &generated["choices"][0]["logprobs"];
    assert_eq!(
        lp["tokens"].as_array().unwrap()[PROMPT_IDS.len()..],
        gen_lp["tokens"].as_array().unwrap()[..]
    );
    for (k, top) in gen_lp["top_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let prompt_top = &lp["top_logprobs"][PROMPT_IDS.len() + k];
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(top), keys(prompt_top), "position {k}");
    }
    // text_offset: from 0, each token's text after the one before; the text is their join.
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let offsets: Vec<u64> = lp["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap())
        .collect();
    let mut at = 0;
    for (token, offset) in tokens.iter().zip(&offsets) {
        assert_eq!(*offset, at);
        at += token.len() as u64;
    }
    assert_eq!(choice["text"].as_str().unwrap(), tokens.concat());

    // A prompt longer than one step's token budget (256) is scored across chunks, fully.
    let long: Vec<u32> = PROMPT_IDS.iter().copied().cycle().take(300).collect();
    let scored = complete(
        addr,
        json!({"model": MODEL_NAME, "prompt": long, "max_tokens": 1, "echo": true,
            "logprobs": 0, "temperature": 0}),
    )
    .await;
    let logprobs = floats(&scored["choices"][0]["logprobs"]["token_logprobs"]);
    assert_eq!(logprobs.len(), 301, "300 prompt tokens and 1 generated");
    assert!(logprobs[0].is_none() && logprobs[1..].iter().all(Option::is_some));
    assert_eq!(scored["usage"]["completion_tokens"], 1);

    // max_tokens 0 without echo asks for nothing: refused by name.
    let reply = post_json(
        addr,
        "/v1/completions",
        &json!({"model": MODEL_NAME,
        "prompt": PROMPT, "max_tokens": 0}),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["param"], "max_tokens");
    // Echo alone with max_tokens 0: the prompt, nothing generated.
    let only = complete(
        addr,
        json!({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 0,
        "echo": true}),
    )
    .await;
    assert_eq!(only["choices"][0]["text"], PROMPT);
    assert_eq!(only["usage"]["completion_tokens"], 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_client_sees_logit_bias_echo_and_prompt_logprobs_as_defined() {
    let server = start_model_server(model_config(4096)).await;
    let (ok, report) = run_python_check("completions_check.py", &["openai"], server.addr).await;
    println!("{report}");
    assert!(ok, "completions check failed:\n{report}");
    assert!(report.contains("completions ok"), "{report}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_prompt_logits_refuses_echo_with_logprobs_by_name() {
    // The test backend, like CUDA today, computes only the last row of each sequence.
    let config = model_config(4096);
    let loader_config = config.clone();
    let server = TestServer::start(config, move || {
        let file = GgufFile::open(model_path()).map_err(tokenscale_engine::Error::from)?;
        let backend = FakeBackend::new(ModelConfig::from_gguf(&file)?, 16, 256);
        start_engine(
            Box::new(backend),
            Tokenizer::from_gguf(&file)?,
            &loader_config,
        )
    })
    .await;
    let body = json!({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 2, "echo": true,
        "logprobs": 1});
    let reply = post_json(server.addr, "/v1/completions", &body).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    let error = &reply.json()["error"];
    assert_eq!(error["param"], "logprobs", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("prompt logprobs"),
        "{error}"
    );
    // Echo alone needs no prompt logits.
    let body = json!({"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 2, "echo": true});
    let echoed = complete(server.addr, body).await;
    assert!(
        echoed["choices"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with(PROMPT)
    );
    server.stop().await;
}
