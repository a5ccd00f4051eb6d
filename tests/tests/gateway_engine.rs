//! Two real SmolLM2 engines behind the real gateway (three processes on loopback): chat and
//! completions, streaming and not, give the same content through the gateway as direct; the
//! gateway's chat TTFT is timed at the first token, not at the role chunk.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "smollm2-135m";
const KEY: &str = "e2e-key";

/// Child processes, killed when the test ends (pass or fail).
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `target/<profile>/NAME`, built first if `cargo test -p tokenscale-e2e` did not build it.
fn binary(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .to_path_buf();
    let path = dir.join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", package, "--bin", name]);
        if dir.ends_with("release") {
            build.arg("--release");
        }
        assert!(
            build.status().expect("cargo runs").success(),
            "building {name}"
        );
    }
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// One HTTP/1.1 exchange (`Connection: close`), de-chunked; `(status, body)`.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         authorization: Bearer {KEY}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    tokenscale_e2e::http::read_response(&mut stream)
}

fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what} not ready within {timeout:?}");
}

/// The generated text of a response: `text` / `message.content`, or the streamed deltas.
fn content(body: &str, stream: bool) -> String {
    if !stream {
        let json: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        let choice = &json["choices"][0];
        return choice["text"]
            .as_str()
            .or(choice["message"]["content"].as_str())
            .unwrap_or_default()
            .to_string();
    }
    assert!(
        body.trim_end().ends_with("data: [DONE]"),
        "stream did not finish: {body}"
    );
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| {
            serde_json::from_str::<serde_json::Value>(data)
                .unwrap_or_else(|e| panic!("{e}: {data}"))
        })
        .map(|chunk| {
            assert!(
                chunk.get("usage").is_none_or(|u| u.is_null())
                    || chunk["choices"].as_array().is_some_and(|c| !c.is_empty()),
                "usage chunk leaked to a client that did not ask: {chunk}"
            );
            let choice = &chunk["choices"][0];
            choice["text"]
                .as_str()
                .or(choice["delta"]["content"].as_str())
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// `count` real engines behind the real gateway, each ready; killed when dropped.
struct Fleet {
    engines: Vec<SocketAddr>,
    gateway: SocketAddr,
    /// The gateway's admin listener: its `/metrics` (the API port has none).
    admin: SocketAddr,
    /// Removed when the fleet drops.
    _dir: tokenscale_scratch::Scratch,
    _procs: Procs,
}

fn fleet(count: usize, name: &str) -> Fleet {
    tokenscale_engine::fetch::ensure_model(MODEL)
        .expect("the test model (scripts/setup fetches it)");
    let engine = binary("tokenscale-engine", "tokenscale-engine");
    let gateway = binary("tokenscale-gateway", "tokenscale-gateway");
    let mut procs = Procs(Vec::new());
    let engines: Vec<SocketAddr> = (0..count)
        .map(|_| ([127, 0, 0, 1], free_port()).into())
        .collect();
    for addr in &engines {
        let child = Command::new(&engine)
            .args([
                "serve",
                "--model",
                MODEL,
                "--host",
                "127.0.0.1",
                "--port",
                &addr.port().to_string(),
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("engine starts");
        procs.0.push(child);
    }
    let dir = tokenscale_scratch::scratch!(&format!("e2e-{name}"));
    let config = dir.join("gateway.yaml");
    let hash = tokenscale_gateway::auth::hash_key(KEY);
    let upstreams: Vec<String> = engines.iter().map(|a| format!("\"http://{a}\"")).collect();
    std::fs::write(
        &config,
        format!(
            "models:\n  - name: {MODEL}\n    upstreams: [{}]\ntenants:\n  - name: e2e\n    keys: [\"{hash}\"]\n    \
             limits: {{requests_per_minute: 600, input_tokens_per_minute: 100000, output_tokens_per_minute: 100000}}\n",
            upstreams.join(", ")
        ),
    )
    .expect("write config");
    let gw: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    procs.0.push(
        Command::new(&gateway)
            .args(["--admin-listen", &admin.to_string()])
            .args(["--listen", &gw.to_string(), "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .spawn()
            .expect("gateway starts"),
    );
    for addr in &engines {
        wait_for("engine", Duration::from_secs(180), || {
            http(*addr, "GET", "/health", "").is_ok_and(|(s, _)| s == 200)
        });
    }
    let ready =
        format!("tokenscale_gateway_replicas{{model_name=\"{MODEL}\",state=\"ready\"}} {count}");
    wait_for("gateway", Duration::from_secs(30), || {
        http(admin, "GET", "/metrics", "").is_ok_and(|(_, b)| b.contains(&ready))
    });
    Fleet {
        engines,
        gateway: gw,
        admin,
        _dir: dir,
        _procs: procs,
    }
}

/// The value of the sample `name` (labels included) in Prometheus text; 0 when absent.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

#[test]
fn gateway_gives_the_same_content_as_the_engines_directly() {
    let fleet = fleet(2, "gateway");
    let (engines, gw) = (&fleet.engines, fleet.gateway);
    let prompt = "The capital of France is";
    let chat = serde_json::json!([{"role": "user", "content": "Name three colours."}]);
    let cases = [
        (
            "/v1/completions",
            serde_json::json!({"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0}),
        ),
        (
            "/v1/chat/completions",
            serde_json::json!({"model": MODEL, "messages": chat, "max_tokens": 12, "temperature": 0}),
        ),
    ];
    for (path, body) in cases {
        // `stream_options: null` is valid OpenAI and some clients send it: the gateway, which
        // asks for usage on every stream, must replace it, not add a second member.
        for (stream, null_options) in [(false, false), (true, false), (true, true)] {
            let mut body = body.clone();
            body["stream"] = serde_json::Value::Bool(stream);
            if null_options {
                body["stream_options"] = serde_json::Value::Null;
            }
            let body = body.to_string();
            let direct = http(engines[0], "POST", path, &body).expect("direct");
            assert_eq!(direct.0, 200, "direct {path}: {}", direct.1);
            let expected = content(&direct.1, stream);
            assert!(!expected.is_empty(), "{path} produced no text");
            // Twice through the gateway: whichever replica serves it, the bytes of content match.
            for _ in 0..2 {
                let via = http(gw, "POST", path, &body).expect("through the gateway");
                assert_eq!(via.0, 200, "gateway {path}: {}", via.1);
                assert_eq!(content(&via.1, stream), expected, "{path} stream={stream}");
            }
        }
    }
    let metrics = http(fleet.admin, "GET", "/metrics", "").expect("metrics").1;
    let generated = sample(
        &metrics,
        &format!("tokenscale_gateway_generation_tokens_total{{model_name=\"{MODEL}\"}}"),
    );
    assert!(
        generated >= 8.0,
        "the gateway read the engines' usage: {generated}"
    );
}

/// A chat stream's first chunk names the role and leaves before prefill; the gateway's TTFT is
/// what the user waits for, the first generated token, so it can never be shorter than the
/// engine's own TTFT for the same request.
#[test]
fn gateway_ttft_of_a_long_chat_prompt_is_at_least_the_engines() {
    let fleet = fleet(1, "ttft");
    let (engine, gw) = (fleet.engines[0], fleet.gateway);
    // ~500 prompt tokens: a prefill of a second or more on a CPU, against a role chunk sent
    // in about a millisecond.
    let prompt = "The river runs past the old stone mill and the quiet garden. ".repeat(40);
    let body = serde_json::json!({
        "model": MODEL, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 4, "temperature": 0, "stream": true,
    })
    .to_string();
    let (status, reply) = http(gw, "POST", "/v1/chat/completions", &body).expect("stream");
    assert_eq!(status, 200, "{reply}");
    assert!(
        reply.contains("\"role\":\"assistant\""),
        "role chunk: {reply}"
    );
    let label = format!("{{model_name=\"{MODEL}\"}}");
    let engine_metrics = http(engine, "GET", "/metrics", "")
        .expect("engine metrics")
        .1;
    let gateway_metrics = http(fleet.admin, "GET", "/metrics", "")
        .expect("gateway metrics")
        .1;
    let engine_ttft = sample(
        &engine_metrics,
        &format!("vllm:time_to_first_token_seconds_sum{label}"),
    );
    let gateway_ttft = sample(
        &gateway_metrics,
        &format!("tokenscale_gateway_time_to_first_token_seconds_sum{label}"),
    );
    let count = sample(
        &gateway_metrics,
        &format!("tokenscale_gateway_time_to_first_token_seconds_count{label}"),
    );
    println!(
        "chat TTFT, one ~500-token prompt: engine {engine_ttft:.3} s, gateway {gateway_ttft:.3} s"
    );
    assert_eq!(count, 1.0, "one TTFT observed:\n{gateway_metrics}");
    assert!(engine_ttft > 0.0, "engine TTFT recorded:\n{engine_metrics}");
    assert!(
        gateway_ttft >= engine_ttft,
        "gateway TTFT {gateway_ttft} s below the engine's {engine_ttft} s: timed from the role chunk"
    );
}
