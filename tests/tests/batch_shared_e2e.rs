//! Two gateway processes share batches through Redis (job state, claims) and an S3-compatible
//! store (moto's S3 server, holding the files): a batch uploaded through one is run by both,
//! and when the first is SIGKILLed mid-batch the other takes over its leased lines and
//! finishes, every line answered exactly once in the output file. One simulated engine serves
//! both (fast: the test runs in well under a minute).

mod cli_support;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use cli_support::{
    Procs, binary, free_port, metric_sum, scratch_dir, spawn, start_s3, start_sim_engine, wait_for,
};
use serde_json::{Value, json};

const MODEL: &str = "shared-sim";
const LINES: usize = 60;
/// Lines each gateway runs at once (`batch.max_concurrency`): the most lines the killed one
/// can leave half-done, so the most the engine may run twice.
const PER_GATEWAY: usize = 4;
const BUCKET: &str = "batches";

/// One HTTP/1.1 request (`Connection: close`); `(status, body)`.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    tokenscale_e2e::http::read_response(&mut stream)
}

/// `(status, JSON)` of a request that must answer JSON.
fn call(addr: SocketAddr, method: &str, path: &str, content_type: &str, body: &[u8]) -> Value {
    let (status, text) = request(addr, method, path, content_type, body)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"));
    assert_eq!(status, 200, "{method} {path} on {addr}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
}

/// A `redis-server` with no persistence on a free port; its port once it answers.
fn start_redis(procs: &mut Procs, dir: &std::path::Path) -> u16 {
    let port = free_port();
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"]);
    spawn(procs, command, &dir.join("redis.log"));
    wait_for("redis-server to answer", Duration::from_secs(10), || {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && std::io::Read::read_exact(&mut stream, &mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    });
    port
}

/// A gateway over `engine`, sharing `redis` and `s3` with the others; its address.
fn start_gateway(
    procs: &mut Procs,
    dir: &std::path::Path,
    name: &str,
    engine: SocketAddr,
    redis: u16,
    s3: SocketAddr,
) -> (usize, SocketAddr) {
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &config,
        format!(
            "models:\n  - name: {MODEL}\n    upstreams: [\"http://{engine}\"]\n    replica_concurrency: 16\n\
             tenants:\n  - name: local\nanonymous: local\n\
             health: {{interval_ms: 200, stale_after_ms: 2000, timeout_ms: 500}}\n\
             limits: {{store: redis, redis_url: \"redis://127.0.0.1:{redis}/0\", key_prefix: e2e, timeout_ms: 1000}}\n\
             batch: {{state: redis, objects: \"s3://{BUCKET}/jobs\", lease_ms: 2000, max_concurrency: {PER_GATEWAY}}}\n"
        ),
    )
    .expect("config");
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut command = Command::new(binary("tokenscale-gateway"));
    command
        .arg("--config")
        .arg(&config)
        .args(["--listen", &addr.to_string()])
        .args(cli_support::admin_listen(addr))
        .env("RUST_LOG", "warn")
        .envs(cli_support::s3_env(s3));
    let index = spawn(procs, command, &dir.join(format!("{name}.log")));
    wait_for(
        &format!("gateway {name} to see its replica ready"),
        Duration::from_secs(30),
        || {
            cli_support::gateway_metrics(addr).is_ok_and(|(_, t)| {
                t.lines().any(|l| {
                    l.starts_with("tokenscale_gateway_replicas{")
                        && l.contains("\"ready\"")
                        && l.ends_with(" 1")
                })
            })
        },
    );
    (index, addr)
}

/// Sum of `name` on `addr`'s `/metrics` (0 when absent or unreachable).
fn metric(addr: SocketAddr, name: &str) -> f64 {
    cli_support::gateway_metrics(addr)
        .ok()
        .and_then(|(_, text)| metric_sum(&text, name))
        .unwrap_or(0.0)
}

/// The batch's input: `LINES` chat lines, `line-0` …
fn input() -> String {
    (0..LINES)
        .map(|i| {
            json!({
                "custom_id": format!("line-{i}"),
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": format!("count to {i}")}],
                    "max_tokens": 48,
                },
            })
            .to_string()
                + "\n"
        })
        .collect()
}

/// `purpose=batch` and the file, as `multipart/form-data`.
fn upload_body(boundary: &str, file: &str) -> Vec<u8> {
    format!(
        "--{boundary}\r\ncontent-disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"input.jsonl\"\r\n\
         content-type: application/jsonl\r\n\r\n{file}\r\n--{boundary}--\r\n"
    )
    .into_bytes()
}

/// `(status, answered)` of the batch as `addr` reports it.
fn batch_state(addr: SocketAddr, id: &str) -> (String, u64, Value) {
    let batch = call(addr, "GET", &format!("/v1/batches/{id}"), "text/plain", b"");
    let counts = &batch["request_counts"];
    let answered =
        counts["completed"].as_u64().unwrap_or(0) + counts["failed"].as_u64().unwrap_or(0);
    (
        batch["status"].as_str().unwrap_or("").to_string(),
        answered,
        batch,
    )
}

#[test]
fn two_gateways_share_a_batch_and_the_survivor_finishes_it_when_one_is_killed() {
    let started = Instant::now();
    let dir = scratch_dir("batch-shared");
    let mut procs = Procs::default();
    let redis = start_redis(&mut procs, &dir);
    let s3 = start_s3(&mut procs, &dir, BUCKET);
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, cli_support::SIM_PROFILE).expect("profile");
    let engine = start_sim_engine(&mut procs, &profile.display().to_string(), MODEL);
    let (a_index, a) = start_gateway(&mut procs, &dir, "gateway-a", engine, redis, s3);
    let (_, b) = start_gateway(&mut procs, &dir, "gateway-b", engine, redis, s3);

    // Upload and create through A.
    let boundary = "e2e-boundary-7d1f";
    let file = call(
        a,
        "POST",
        "/v1/files",
        &format!("multipart/form-data; boundary={boundary}"),
        &upload_body(boundary, &input()),
    );
    let file_id = file["id"].as_str().expect("file id").to_string();
    let create = json!({
        "input_file_id": file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    });
    let batch = call(
        a,
        "POST",
        "/v1/batches",
        "application/json",
        create.to_string().as_bytes(),
    );
    let id = batch["id"].as_str().expect("batch id").to_string();

    // Through B, until both gateways have answered lines and the batch is well under way.
    let served = || {
        (
            metric(a, "tokenscale_gateway_batch_requests_total"),
            metric(b, "tokenscale_gateway_batch_requests_total"),
        )
    };
    let mut before_kill = (String::new(), 0, Value::Null);
    wait_for(
        "both gateways to answer lines",
        Duration::from_secs(30),
        || {
            before_kill = batch_state(b, &id);
            let (by_a, by_b) = served();
            assert_ne!(
                before_kill.0, "completed",
                "the batch finished before the kill (A {by_a}, B {by_b} lines): make lines longer"
            );
            by_a > 0.0 && by_b > 0.0 && before_kill.1 >= 15
        },
    );
    let (by_a, by_b) = served();
    let in_flight_a = metric(a, "tokenscale_gateway_batch_in_flight_requests");
    procs.0[a_index].kill().expect("SIGKILL gateway A");
    let killed_at = Instant::now();
    eprintln!(
        "before the kill: {} of {LINES} lines answered (A {by_a}, B {by_b}); A had {in_flight_a} in flight",
        before_kill.1
    );
    assert!(by_a > 0.0 && by_b > 0.0, "both gateways served lines");

    // B alone: it takes over A's leased lines once their leases end, and finishes.
    let mut last = (String::new(), 0, Value::Null);
    wait_for("B to complete the batch", Duration::from_secs(40), || {
        last = batch_state(b, &id);
        last.0 == "completed"
    });
    let finished_after = killed_at.elapsed();
    let batch = last.2;
    assert_eq!(batch["request_counts"]["completed"], LINES, "{batch}");
    assert_eq!(batch["request_counts"]["failed"], 0, "{batch}");

    // The output file, through B: every custom_id exactly once, each a 200.
    let output_id = batch["output_file_id"].as_str().expect("output file");
    let path = format!("/v1/files/{output_id}/content");
    let (status, output) = request(b, "GET", &path, "text/plain", b"").expect("output file");
    assert_eq!(status, 200, "{output}");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(value["response"]["status_code"], 200, "{line}");
        let custom_id = value["custom_id"].as_str().expect("custom_id").to_string();
        *seen.entry(custom_id).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = (0..LINES).map(|i| (format!("line-{i}"), 1)).collect();
    assert_eq!(seen, expected, "every line exactly once");

    // The engine: every line ran once, plus at most the lines A had started and not recorded.
    let engine_started = metric(engine, "vllm:request_queue_time_seconds_count");
    let engine_finished = metric(engine, "vllm:e2e_request_latency_seconds_count");
    let by_b_total = metric(b, "tokenscale_gateway_batch_requests_total");
    eprintln!(
        "after the kill: B finished in {:.1}s; lines answered by A {by_a}, by B {by_b_total}; \
         engine requests started {engine_started}, finished {engine_finished} for {LINES} lines; \
         whole test {:.1}s",
        finished_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    // A's count was read before the kill; it may have recorded a few more after.
    assert!(
        by_a + by_b_total <= LINES as f64,
        "a line counted by both gateways"
    );
    assert!(engine_finished >= LINES as f64, "{engine_finished}");
    assert!(
        engine_started <= (LINES + PER_GATEWAY) as f64,
        "the engine ran {engine_started} requests for {LINES} lines: more than A's {PER_GATEWAY} \
         lines in flight ran twice"
    );
    drop(procs);
}
