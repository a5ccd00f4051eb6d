//! Shared by the `tokenscale` CLI e2e suites (`bench_e2e`, `up_e2e`): finding the built
//! binaries, child processes that die with the test, loopback HTTP, bounded waits.

#![allow(dead_code)] // each suite uses a different part

pub mod soak;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tokenscale_scratch::Scratch;

/// `target/<profile>/NAME`. The suites do not build binaries themselves: run
/// `cargo build --workspace --bins` (CI's `scripts/test` does) before `cargo test`.
/// `TOKENSCALE_E2E_BIN_DIR` points them at other builds (to measure an older version under the
/// same load: its `up` then gets no `--log-dir`, which older versions lack).
pub fn binary(name: &str) -> PathBuf {
    if let Some(dir) = other_binaries() {
        return dir.join(name);
    }
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .to_path_buf();
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` before these tests",
        path.display()
    );
    path
}

/// The folder of `TOKENSCALE_E2E_BIN_DIR`, when set.
fn other_binaries() -> Option<PathBuf> {
    std::env::var_os("TOKENSCALE_E2E_BIN_DIR").map(PathBuf::from)
}

/// Child processes, killed when the test ends (pass or fail).
#[derive(Default)]
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// One HTTP/1.1 GET (`Connection: close`), de-chunked; `(status, body)`.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    exchange(addr, "GET", path, None, "", Duration::from_secs(30))
}

/// One HTTP/1.1 exchange (`Connection: close`) with a JSON `body`, sent with `key` as a bearer
/// token when given, answered within `wait`, de-chunked; `(status, body)`.
pub fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
    wait: Duration,
) -> std::io::Result<(u16, String)> {
    exchange_with_head(addr, method, path, key, body, wait).map(|(status, _, body)| (status, body))
}

/// [`exchange`], also returning the response's head (status line and headers).
pub fn exchange_with_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
    wait: Duration,
) -> std::io::Result<(u16, String, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(wait))?;
    let authorization = key.map_or(String::new(), |k| format!("authorization: Bearer {k}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\n{authorization}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    tokenscale_e2e::http::read_response_with_head(&mut stream)
}

/// Where each gateway a test started serves `/metrics` (its admin listener), by API address.
static ADMIN: std::sync::Mutex<std::collections::BTreeMap<SocketAddr, SocketAddr>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The flags that give the gateway (or `up`) serving its API on `api` an admin listener on a
/// free loopback port, remembered for [`gateway_metrics`]: the API port has no `/metrics`.
/// None for the builds of `TOKENSCALE_E2E_BIN_DIR`: older ones serve `/metrics` on the API
/// port and lack the flag.
pub fn admin_listen(api: SocketAddr) -> Vec<String> {
    if other_binaries().is_some() {
        return Vec::new();
    }
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    ADMIN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(api, admin);
    vec!["--admin-listen".into(), admin.to_string()]
}

/// `GET /metrics` of the gateway serving its API on `api`, from its admin listener (see
/// [`admin_listen`]; the API address itself for a gateway started without one).
pub fn gateway_metrics(api: SocketAddr) -> std::io::Result<(u16, String)> {
    get(admin_address(api).unwrap_or(api), "/metrics")
}

/// The admin listener of the gateway serving its API on `api` (see [`admin_listen`]).
pub fn admin_address(api: SocketAddr) -> Option<SocketAddr> {
    ADMIN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&api)
        .copied()
}

/// One HTTP/1.1 POST of a JSON `body` (`Connection: close`), answered within `wait`,
/// de-chunked; `(status, body)`.
pub fn post(
    addr: SocketAddr,
    path: &str,
    body: &str,
    wait: Duration,
) -> std::io::Result<(u16, String)> {
    exchange(addr, "POST", path, None, body, wait)
}

/// Polls `ready` every 200 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// Waits for `child` to exit within `timeout`; kills it and panics otherwise.
pub fn wait_exit(child: &mut Child, what: &str, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sum of the values of metric `name` (all series) in a Prometheus exposition.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// A fresh scratch folder of the calling test, removed when the guard drops.
pub fn scratch_dir(tag: &str) -> Scratch {
    tokenscale_scratch::scratch!(tag)
}

/// `tokenscale-engine serve` with `args` on a free port; returns its address once `/health`
/// is 200 (bounded by `ready_timeout`).
pub fn start_engine(procs: &mut Procs, args: &[&str], ready_timeout: Duration) -> SocketAddr {
    let port = free_port();
    let child = Command::new(binary("tokenscale-engine"))
        .arg("serve")
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("engine starts");
    procs.0.push(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for("the engine's /health", ready_timeout, || {
        get(addr, "/health").is_ok_and(|(s, _)| s == 200)
    });
    addr
}

/// A `tokenscale-gateway` process serving `config` (YAML, written to `dir/gateway.yaml`) on a
/// free loopback port with an admin listener ([`admin_listen`]), logging at `rust_log` to
/// `dir/gateway.log` (JSON lines); its API address once each of `models` has a ready replica.
pub fn start_gateway(
    procs: &mut Procs,
    dir: &std::path::Path,
    config: &str,
    rust_log: &str,
    models: &[&str],
) -> SocketAddr {
    start_gateway_with_env(procs, dir, config, rust_log, models, &[])
}

/// [`start_gateway`] with `env` added to the gateway's environment.
pub fn start_gateway_with_env(
    procs: &mut Procs,
    dir: &std::path::Path,
    config: &str,
    rust_log: &str,
    models: &[&str],
    env: &[(&str, String)],
) -> SocketAddr {
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, config).expect("gateway config");
    let api: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    procs.0.push(
        Command::new(binary("tokenscale-gateway"))
            .arg("--config")
            .arg(&path)
            .args(["--listen", &api.to_string(), "--log-json"])
            .args(admin_listen(api))
            .env("RUST_LOG", rust_log)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::fs::File::create(dir.join("gateway.log")).expect("log"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("gateway starts"),
    );
    wait_for(
        "the gateway's replicas ready",
        Duration::from_secs(30),
        || {
            gateway_metrics(api).is_ok_and(|(_, text)| {
                models.iter().all(|m| {
                    text.contains(&format!(
                        "tokenscale_gateway_replicas{{model_name=\"{m}\",state=\"ready\"}} 1"
                    ))
                })
            })
        },
    );
    api
}

/// A simulated engine (`--backend sim`) serving `model` with `profile` (a bundled profile's
/// name or a file, e.g. [`SIM_PROFILE`] written out), on a free port; its address once ready.
pub fn start_sim_engine(procs: &mut Procs, profile: &str, model: &str) -> SocketAddr {
    let args = [
        "--backend",
        "sim",
        "--sim-profile",
        profile,
        "--served-model-name",
        model,
    ];
    start_engine(procs, &args, Duration::from_secs(60))
}

/// Pids whose parent is `parent` (from `/proc`).
pub fn children_of(parent: u32) -> Vec<u32> {
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
pub fn engine_alive(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    String::from_utf8_lossy(&cmdline).contains("tokenscale-engine") && !zombie
}

pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {sig} {pid}");
}

/// `tokenscale up` started from a manifest.
pub struct Up {
    pub pid: u32,
    /// The gateway.
    pub addr: SocketAddr,
    /// Where its stderr goes.
    pub log: PathBuf,
}

/// Starts `tokenscale up -f manifest` (written to `dir/md.yaml`) on a free port, its stderr in
/// `dir/up.log`, and waits until `ready` replicas of `model` are ready behind its gateway
/// (with `ready` 0, until the gateway answers).
pub fn start_up(
    procs: &mut Procs,
    dir: &std::path::Path,
    manifest: &str,
    model: &str,
    ready: u32,
) -> Up {
    let manifest_path = dir.join("md.yaml");
    std::fs::write(&manifest_path, manifest).expect("manifest written");
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log = dir.join("up.log");
    let stderr = std::fs::File::create(&log).expect("log file");
    let mut command = Command::new(binary("tokenscale"));
    command.args(["up", "--listen", &addr.to_string()]);
    command.args(admin_listen(addr));
    if other_binaries().is_none() {
        command.arg("--log-dir").arg(dir.join("replicas"));
    }
    let child = command
        .arg("-f")
        .arg(&manifest_path)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("up starts");
    let pid = child.id();
    procs.0.push(child);
    wait_for(
        &format!("{ready} ready replicas behind the gateway"),
        Duration::from_secs(120),
        || {
            if ready == 0 {
                get(addr, "/health").is_ok()
            } else {
                ready_replicas(addr, model) >= Some(ready)
            }
        },
    );
    Up { pid, addr, log }
}

/// `tokenscale_gateway_replicas{state="ready"}` of `model`.
pub fn ready_replicas(addr: SocketAddr, model: &str) -> Option<u32> {
    let (_, text) = gateway_metrics(addr).ok()?;
    let model = format!("\"{model}\"");
    text.lines()
        .filter(|l| {
            l.starts_with("tokenscale_gateway_replicas{")
                && l.contains("state=\"ready\"")
                && l.contains(&model)
        })
        .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u32)
}

/// A simulated replica: 10 ms a step plus 1 ms a sequence, 16 sequences at most: ~600 output
/// tokens/s at a full batch.
pub const SIM_PROFILE: &str = "name: e2e-sim
gpus_per_replica: 1
step: {t0_s: 0.01, prefill_s_per_token: 0.00002, decode_s_per_seq: 0.001, kv_read_s_per_token: 0}
kv: {block_tokens: 16, blocks: 4096}
max_num_seqs: 16
max_batch_tokens: 2048
cold_start_s: 0
";

/// A `ModelDeployment` of simulated replicas following the profile file `profile`, scaled
/// between `min` and `max` every second, with an SLO of 500 ms TTFT and 50 ms TPOT.
pub fn sim_manifest(model: &str, profile: &std::path::Path, min: u32, max: u32) -> String {
    format!(
        "apiVersion: tokenscale.dev/v1alpha1
kind: ModelDeployment
metadata:
  name: {model}
spec:
  model: {{source: {model}, servedName: {model}}}
  engine:
    backend: sim
    args: [\"--sim-profile\", {profile:?}]
    drainTimeout: 10s
  replicas: {{min: {min}, max: {max}}}
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

/// Starts `command` (stdout dropped, stderr to `log`), owned by `procs`; its index there.
pub fn spawn(procs: &mut Procs, mut command: Command, log: &std::path::Path) -> usize {
    let stderr = std::fs::File::create(log).expect("log file");
    let child: Child = command
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e} (scripts/setup installs it)"));
    procs.0.push(child);
    procs.0.len() - 1
}

/// moto's S3 server on a free port with `bucket` created; its address.
pub fn start_s3(procs: &mut Procs, dir: &std::path::Path, bucket: &str) -> SocketAddr {
    let port = free_port();
    let mut command = tokenscale_e2e::tools::python_with("moto.server").expect("moto");
    command.args([
        "-m",
        "moto.server",
        "-H",
        "127.0.0.1",
        "-p",
        &port.to_string(),
    ]);
    spawn(procs, command, &dir.join("s3.log"));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    // A plain PUT of the bucket: moto takes it unsigned.
    let path = format!("/{bucket}");
    wait_for("moto to create the bucket", Duration::from_secs(30), || {
        exchange(addr, "PUT", &path, None, "", Duration::from_secs(5)).is_ok_and(|(s, _)| s == 200)
    });
    addr
}

/// The environment that points a gateway's `s3://` store at the moto server `s3`.
pub fn s3_env(s3: SocketAddr) -> [(&'static str, String); 5] {
    [
        ("AWS_ENDPOINT_URL", format!("http://{s3}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "e2e".into()),
        ("AWS_SECRET_ACCESS_KEY", "e2e".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
}
