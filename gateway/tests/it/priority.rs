//! The request's class in each engine's own terms: a vLLM replica run with
//! `--scheduling-policy priority` receives vLLM's integer `priority` (interactive 0, batch
//! 100: lower is served first), the client's body otherwise as it sent it; a vLLM in arrival
//! order (which refuses a non-zero priority) receives the body without one.

use tokenscale_common::engines::{EngineKind, EnginePriority, PriorityOrder};

use crate::support::*;

/// A chat body as the `openai` client writes it, with members a re-printing proxy would
/// change (a long float, a nested `priority`), the class in the gateway's own words.
const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"Say hi."}],"max_tokens":4,"temperature":8.888888888888889e86,"metadata":{"priority":"x"},"priority":"batch"}"#;

/// The replica's view of `body` sent with `headers`: what it received.
async fn received(
    client: &TestClient,
    replica: &MockReplica,
    headers: &[(&str, &str)],
    body: &str,
) -> serde_json::Value {
    let mut all = vec![
        ("content-type", "application/json"),
        ("authorization", "Bearer key-a"),
    ];
    all.extend_from_slice(headers);
    let reply = client
        .send("POST", "/v1/chat/completions", &all, body.to_string())
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    replica
        .state
        .last_body
        .lock()
        .expect("body")
        .clone()
        .expect("the replica got a body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_vllm_receives_the_class_as_its_priority_field() {
    let replica = MockReplica::start().await;
    let extra = "    engine: vllm\n    engine_args: [--scheduling-policy, priority]\n";
    let (running, client) = gateway(&config(&[&replica], "{}", extra)).await;
    wait_ready(&running, "m", 1).await;
    let sent: serde_json::Value = serde_json::from_str(CHAT).expect("json");
    let with = |value: i64| {
        let mut expected = sent.clone();
        expected["priority"] = value.into();
        expected
    };

    // The class from the body's own `priority`: its class name becomes vLLM's integer.
    assert_eq!(received(&client, &replica, &[], CHAT).await, with(100));
    // The header decides over the body.
    let interactive = [("x-tokenscale-priority", "interactive")];
    assert_eq!(
        received(&client, &replica, &interactive, CHAT).await,
        with(0)
    );
    // A body without the member gets it (interactive: the default class).
    let plain = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}"#;
    let got = received(&client, &replica, &[], plain).await;
    let mut expected: serde_json::Value = serde_json::from_str(plain).expect("json");
    expected["priority"] = 0.into();
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vllm_in_arrival_order_gets_the_body_untouched_and_discovery_can_turn_it_on() {
    let replica = MockReplica::start().await;
    let (running, client) = gateway(&config(&[&replica], "{}", "    engine: vllm\n")).await;
    wait_ready(&running, "m", 1).await;
    let plain = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}"#;
    let batch = [("x-tokenscale-priority", "batch")];
    let untouched: serde_json::Value = serde_json::from_str(plain).expect("json");
    assert_eq!(received(&client, &replica, &batch, plain).await, untouched);
    // The gateway's class name is read, and not passed on: vLLM would refuse a string.
    let named = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"priority":"batch","max_tokens":2}"#;
    assert_eq!(received(&client, &replica, &[], named).await, untouched);

    // What Kubernetes discovery records for a ModelDeployment whose replicas run priority.
    let priority = EnginePriority::Field {
        order: PriorityOrder::LowerFirst,
        preempts: true,
    };
    running.registry.set_engine("m", EngineKind::Vllm, priority);
    let got = received(&client, &replica, &batch, plain).await;
    assert_eq!(got["priority"], 100);
}

#[test]
fn an_unknown_engine_kind_is_refused_with_the_known_ones() {
    let yaml = "models:\n  - name: m\n    upstreams: [\"http://127.0.0.1:1\"]\n    engine: tgi\n";
    let error = tokenscale_gateway::config::Config::from_yaml(yaml)
        .expect_err("refused")
        .to_string();
    assert!(error.contains("tgi"), "{error}");
    assert!(error.contains("vllm"), "{error}");
}
