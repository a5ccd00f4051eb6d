//! `tokenscale up` with a `sim`-backend manifest, driven by `tokenscale bench` through its
//! gateway: a 1× → 4× → 1× ramp makes the replicas rise to ≥ 3 and fall back, the settled
//! p95 TTFT meets the SLO, every request ends 200, and no engine outlives `up` (stopped by
//! SIGTERM, or killed with SIGKILL).

mod cli_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cli_support::{Procs, binary, free_port, get, scratch_dir, wait_exit, wait_for};

const MODEL: &str = "sim-e2e";
/// One replica: 10 ms per step plus 1 ms per sequence, 16 sequences at most: ~600 output
/// tokens/s at full batch, ~500 within the SLO below.
const PROFILE: &str = "name: up-e2e
gpus_per_replica: 1
step: {t0_s: 0.01, prefill_s_per_token: 0.00002, decode_s_per_seq: 0.001, kv_read_s_per_token: 0}
kv: {block_tokens: 16, blocks: 4096}
max_num_seqs: 16
max_batch_tokens: 2048
cold_start_s: 0
";
const SLO_TTFT_S: f64 = 0.5;
/// Output tokens per request; at 8 requests/s one replica's worth (~400 tokens/s).
const OUTPUT_TOKENS: &str = "50";
const BASE_RATE: f64 = 8.0;

fn manifest(profile: &Path) -> String {
    format!(
        "apiVersion: tokenscale.dev/v1alpha1
kind: ModelDeployment
metadata:
  name: {MODEL}
spec:
  model: {{source: {MODEL}, servedName: {MODEL}}}
  engine:
    backend: sim
    args: [\"--sim-profile\", {profile:?}]
    drainTimeout: 10s
  replicas: {{min: 1, max: 6}}
  slo: {{ttftP95: 500ms, tpotP95: 50ms}}
  scaling:
    targetUtilization: 0.8
    stableWindow: 6s
    panicWindow: 2s
    period: 1s
    initialTokensPerSecondPerGpu: 500
"
    )
}

/// Starts `up` on a free port; returns the child and the gateway address once a replica is
/// ready behind it.
fn start_up(procs: &mut Procs, dir: &Path) -> (u32, std::net::SocketAddr) {
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, PROFILE).expect("profile written");
    let manifest_path = dir.join("md.yaml");
    std::fs::write(&manifest_path, manifest(&profile)).expect("manifest written");
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log = std::fs::File::create(dir.join("up.log")).expect("log file");
    let child = Command::new(binary("tokenscale"))
        .args(["up", "--listen", &addr.to_string(), "-f"])
        .arg(&manifest_path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("up starts");
    let pid = child.id();
    procs.0.push(child);
    wait_for(
        "a ready replica behind the gateway",
        Duration::from_secs(60),
        || ready_replicas(addr) >= Some(1),
    );
    (pid, addr)
}

/// `tokenscale_gateway_replicas{state="ready"}` of the model.
fn ready_replicas(addr: std::net::SocketAddr) -> Option<u32> {
    let (_, text) = get(addr, "/metrics").ok()?;
    text.lines()
        .filter(|l| {
            l.starts_with("tokenscale_gateway_replicas{")
                && l.contains("state=\"ready\"")
                && l.contains(MODEL)
        })
        .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u32)
}

/// Pids whose parent is `parent` (from `/proc`).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Fields after the `(comm)`: state, ppid, ...
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            after
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
                == Some(parent)
        })
        .collect()
}

/// Whether `pid` is still a running `tokenscale-engine` (not gone, not a zombie).
fn engine_alive(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    String::from_utf8_lossy(&cmdline).contains("tokenscale-engine") && !zombie
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {sig} {pid}");
}

/// Runs one open-loop bench point through the gateway and returns its report's point.
fn bench(
    addr: std::net::SocketAddr,
    dir: &Path,
    name: &str,
    rate: f64,
    duration_s: u32,
) -> serde_json::Value {
    let out = dir.join(format!("{name}.json"));
    let mut child: Child = Command::new(binary("tokenscale"))
        .args([
            "bench",
            "--url",
            &format!("http://{addr}"),
            "--model",
            MODEL,
        ])
        .args([
            "--rate",
            &rate.to_string(),
            "--duration",
            &format!("{duration_s}s"),
        ])
        .args([
            "--input-tokens",
            "32",
            "--output-tokens",
            OUTPUT_TOKENS,
            "--seed",
            "1",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("bench starts");
    let status = wait_exit(
        &mut child,
        "tokenscale bench",
        Duration::from_secs(u64::from(duration_s) + 120),
    );
    assert!(status.success(), "bench {name} failed: {status}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("report")).expect("JSON");
    report["points"][0].clone()
}

/// Every failure is a documented refusal (429 limits, 503 no capacity); here there are none.
fn assert_all_ok(point: &serde_json::Value) {
    let errors = point["errors"].as_object().expect("errors");
    assert!(errors.is_empty(), "requests failed: {point}");
    assert!(point["requests_ok"].as_u64() > Some(0), "{point}");
}

#[test]
fn a_load_ramp_scales_the_replicas_up_and_back_down_within_the_slo() {
    let dir = scratch_dir("up-e2e");
    let mut procs = Procs::default();
    let (up_pid, addr) = start_up(&mut procs, &dir);

    // Watch the ready replicas through the gateway while the ramp runs.
    let seen = Arc::new(Mutex::new(Vec::<u32>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (seen, stop) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(n) = ready_replicas(addr) {
                    seen.lock().expect("lock").push(n);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let base = bench(addr, &dir, "base", BASE_RATE, 10);
    let peak = bench(addr, &dir, "peak", 4.0 * BASE_RATE, 30);
    let engines_at_peak = children_of(up_pid);
    let max_at_peak = seen
        .lock()
        .expect("lock")
        .iter()
        .copied()
        .max()
        .unwrap_or(0);
    let settled = bench(addr, &dir, "settled", BASE_RATE, 30);
    wait_for(
        "the replicas to fall back to ≤ 2",
        Duration::from_secs(60),
        || ready_replicas(addr).is_some_and(|n| n <= 2),
    );
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");

    for point in [&base, &peak, &settled] {
        assert_all_ok(point);
    }
    assert!(
        max_at_peak >= 3,
        "replicas seen: {:?}",
        seen.lock().expect("lock")
    );
    assert!(
        engines_at_peak.len() >= 3,
        "engine children at the peak: {engines_at_peak:?}"
    );
    let ttft_p95 = settled["ttft_s"]["p95"].as_f64().expect("ttft p95");
    assert!(
        ttft_p95 <= SLO_TTFT_S,
        "settled p95 TTFT {ttft_p95} s above the SLO"
    );

    // SIGTERM: up drains, stops every engine, and exits.
    let engines = children_of(up_pid);
    assert!(!engines.is_empty());
    signal(up_pid, "-TERM");
    let status = wait_exit(
        &mut procs.0[0],
        "tokenscale up after SIGTERM",
        Duration::from_secs(60),
    );
    assert!(status.success(), "up exited with {status}");
    for pid in engines.iter().chain(&engines_at_peak) {
        assert!(!engine_alive(*pid), "engine {pid} outlived up");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn engines_die_with_up_even_when_it_is_killed() {
    let dir = scratch_dir("up-kill");
    let mut procs = Procs::default();
    let (up_pid, _addr) = start_up(&mut procs, &dir);
    let engines = children_of(up_pid);
    assert!(!engines.is_empty(), "up has engine children");
    signal(up_pid, "-KILL");
    let _ = wait_exit(
        &mut procs.0[0],
        "tokenscale up after SIGKILL",
        Duration::from_secs(10),
    );
    wait_for(
        "the engines to die with up",
        Duration::from_secs(10),
        || engines.iter().all(|pid| !engine_alive(*pid)),
    );
    let _ = std::fs::remove_dir_all(dir);
}
