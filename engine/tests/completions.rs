//! Completions as OpenAI and vLLM define them (issue 39, item 5), on the real SmolLM2 model at
//! temperature 0: `logit_bias` bans and forces tokens on both routes and refuses bad input by
//! name. The sampler's own rule (the bias is added before the argmax) is checked on hand-made
//! logits.

// In tests an unwrap is an assertion: a failure should stop the test loudly.
#![allow(clippy::unwrap_used)]

mod server_support;

use serde_json::{Value, json};
use server_support::client::post_json;
use server_support::splice::stream_with_ids;
use server_support::{MODEL_NAME, model_config, start_model_server};
use tokenscale_common::openai::TOKEN_IDS_MEMBER;
use tokenscale_engine::sampling::{Sampler, SamplingParams};

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
