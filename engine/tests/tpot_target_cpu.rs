//! `serve --tpot-target` on the CPU backend: the real `tokenscale-engine serve` process on the
//! real test model, 64 concurrent streaming clients. A sweep of fixed `--max-num-seqs` measures
//! this machine's curve (time per output token against throughput); the target is set between
//! two of its points, from the same run's figures (never a wall-clock constant, so the test
//! means the same on a fast or a slow CPU). Under the target the engine holds the p95 time per
//! token within it, the excess waits, and the throughput is at least 90% of the best a fixed
//! cap reaches within it. Every configuration runs in each of several interleaved rounds and
//! the rounds are pooled, so a noisy neighbour on the machine falls on all of them alike.

mod server_support;
mod tpot_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use server_support::{EngineProcess, MODEL_NAME, client, metric_value, model_serve_command};
use tokenscale_common::metrics::engine as names;
use tpot_support::{Measured, Sweep};

const STREAMS: usize = 64;
const OUTPUT_TOKENS: usize = 20;
/// The fixed caps swept; the target lies between the p95s of the middle two.
const CAPS: [usize; 5] = [4, 8, 16, 32, 64];
/// Rounds, each running every configuration once: the first calibrates the target.
const ROUNDS: usize = 3;

/// One engine process and where it listens.
struct Engine {
    _process: EngineProcess,
    addr: SocketAddr,
}

/// Starts an engine with `--max-num-seqs cap` (and `--tpot-target` when given) and warms it
/// with one request, so the first run's figures hold no first-touch costs.
async fn start(cap: usize, target: Option<Duration>) -> Engine {
    let cap = cap.to_string();
    let mut args = vec![
        "--backend",
        "cpu",
        "--speculative",
        "off",
        "--kv-cache-tokens",
        "8192",
        "--max-num-seqs",
        &cap,
    ];
    let target = target.map(|t| format!("{}us", t.as_micros()));
    if let Some(target) = &target {
        args.extend(["--tpot-target", target]);
    }
    let (process, addr) = server_support::spawn_ready(&mut model_serve_command(&args)).await;
    let warm = client::post_json(addr, "/v1/completions", &request(0, false)).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    Engine {
        _process: process,
        addr,
    }
}

/// Stream `i`'s request: a distinct prompt (each costs its own prefill), fixed length output.
fn request(i: usize, stream: bool) -> Value {
    json!({
        "model": MODEL_NAME,
        "prompt": format!("Story number {i}. Once upon a time, in a town called"),
        "max_tokens": OUTPUT_TOKENS,
        "ignore_eos": true,
        "temperature": 0,
        "stream": stream,
    })
}

/// The arrival time of each text chunk of one streamed completion.
async fn stream_times(addr: SocketAddr, i: usize) -> Vec<Instant> {
    let body = Bytes::from(request(i, true).to_string());
    let headers = [("content-type", "application/json")];
    let response = client::send(addr, "POST", "/v1/completions", body, &headers)
        .await
        .unwrap_or_else(|e| panic!("stream {i}: {e}"));
    assert_eq!(response.status(), 200, "stream {i}");
    let mut body = response.into_body();
    let mut times = Vec::new();
    while let Some(frame) = client::next_frame(&mut body).await {
        let now = Instant::now();
        let text = String::from_utf8_lossy(&frame);
        for data in text
            .split("\n\n")
            .filter_map(|e| e.trim().strip_prefix("data: "))
        {
            let chunk: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            if chunk["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
            {
                times.push(now);
            }
        }
    }
    times
}

/// What the engine's gauges showed during a run, polled until `done`.
#[derive(Debug, Default)]
struct Gauges {
    /// The most requests waiting.
    waiting: f64,
    /// The running-set limit in force, each change in order.
    limits: Vec<f64>,
}

impl Gauges {
    fn lowest_limit(&self) -> f64 {
        self.limits.iter().copied().fold(f64::INFINITY, f64::min)
    }
}

async fn watch(addr: SocketAddr, done: Arc<AtomicBool>) -> Gauges {
    let mut gauges = Gauges::default();
    while !done.load(Ordering::Relaxed) {
        if let Ok(reply) = client::get(addr, "/metrics").await {
            let read = |name| metric_value(&reply.body, name).unwrap_or(f64::NAN);
            gauges.waiting = gauges.waiting.max(read(names::NUM_REQUESTS_WAITING));
            let limit = read(names::MAX_NUM_SEQS);
            if limit.is_finite() && gauges.limits.last() != Some(&limit) {
                gauges.limits.push(limit);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gauges
}

/// One run: `STREAMS` streams at once. Returns the figures and what the gauges showed.
async fn run(engine: &Engine) -> (Measured, Gauges) {
    let done = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch(engine.addr, done.clone()));
    let started = Instant::now();
    let streams: Vec<_> = (0..STREAMS)
        .map(|i| tokio::spawn(stream_times(engine.addr, i + 1)))
        .collect();
    let mut times = Vec::new();
    for stream in streams {
        let t = stream.await.expect("stream task");
        assert_eq!(t.len(), OUTPUT_TOKENS, "every stream gets its tokens");
        times.push(t);
    }
    let measured = Measured::from_streams(&times, started);
    done.store(true, Ordering::Relaxed);
    (measured, watcher.await.expect("watcher"))
}

/// A target between the p95s of the sweep's middle caps (their geometric mean): a fixed cap
/// within it exists, and the controller has room between it and the next cap.
fn target_between(fixed: &[(usize, Measured)]) -> Duration {
    let mid = CAPS.len() / 2;
    let (low, high) = (fixed[mid].1.tpot_p95_s(), fixed[mid + 1].1.tpot_p95_s());
    Duration::from_secs_f64((low * high.max(low)).sqrt())
}

/// One measurement: every fixed cap, the target set from the first round, the rounds pooled;
/// the verdict of the acceptance rules.
async fn measure() -> Result<(), String> {
    let mut engines = Vec::new();
    for cap in CAPS {
        engines.push(start(cap, None).await);
    }
    let mut fixed: Vec<(usize, Measured)> =
        CAPS.iter().map(|&c| (c, Measured::default())).collect();
    for (engine, (_, pooled)) in engines.iter().zip(&mut fixed) {
        pooled.pool(run(engine).await.0);
    }
    let target = target_between(&fixed);
    let held_engine = start(STREAMS, Some(target)).await;
    let mut held = Measured::default();
    let mut gauges = Vec::new();
    for _ in 1..ROUNDS {
        let (m, g) = run(&held_engine).await;
        held.pool(m);
        gauges.push(g);
        for (engine, (_, pooled)) in engines.iter().zip(&mut fixed) {
            pooled.pool(run(engine).await.0);
        }
    }
    let waiting = gauges.iter().map(|g| g.waiting).fold(0.0, f64::max);
    let limit = gauges
        .iter()
        .map(Gauges::lowest_limit)
        .fold(f64::INFINITY, f64::min);
    let traces: Vec<String> = gauges.iter().map(|g| format!("{:?}", g.limits)).collect();
    let sweep = Sweep {
        fixed: &fixed,
        target_s: target.as_secs_f64(),
        held: &held,
        note: format!(
            "most waiting: {waiting}, lowest running-set limit: {limit}, the limit each 100 ms \
             by round: {}",
            traces.join(" ")
        ),
    };
    sweep.verdict(waiting > 0.0 && limit < STREAMS as f64)
}

/// The machine's 1-minute load average, printed beside a failure.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// On a 2-core machine shared with other work, one disturbed round can decide the 90% rule:
/// the fixed caps' throughputs differ by a quarter between configurations under load (and on
/// this backend a decode step of 4 sequences has cost 3.2 ms a sequence where 8 cost 6.1, which
/// the controller now follows by measuring its rate by batch size). A failed attempt is
/// therefore measured once more, from fresh processes, and both tables are printed; a
/// controller that does not hold the target fails both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_cpu_backend_the_engine_holds_its_tpot_target_at_the_best_fixed_throughput() {
    if let Err(first) = measure().await {
        println!(
            "attempt 1 failed (load average {}): {first}\nmeasuring once more",
            load_average()
        );
        if let Err(second) = measure().await {
            panic!(
                "both attempts failed (load average {}).\nfirst: {first}\nsecond: {second}",
                load_average()
            );
        }
    }
}
