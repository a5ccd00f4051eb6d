//! Shared by the server test files: the test model's path, a deterministic fake backend (for
//! tests of the serving machinery that do not need real logits), an in-process server on
//! 127.0.0.1:0, and a small HTTP client.
#![allow(dead_code)]

pub mod client;
pub mod fake;
pub mod splice;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokenscale_engine::server::{self, LoadError, LoadedModel, ServeConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The test model, fetched by the project's set-up; a missing model fails the test.
pub fn model_path() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let path = home.join(".cache/tokenscale/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.exists(),
        "test model missing at {} (run scripts/setup)",
        path.display()
    );
    path
}

/// A server running in this process until dropped or shut down.
pub struct TestServer {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts a server with `config` whose model comes from `loader`, and waits (bounded)
    /// until `/health` says ready.
    pub async fn start<L>(config: ServeConfig, loader: L) -> Self
    where
        L: FnOnce() -> Result<LoadedModel, LoadError> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.await;
            };
            if let Err(err) = server::serve_on(listener, config, loader, shutdown).await {
                panic!("server failed: {err}");
            }
        });
        let server = Self {
            addr,
            shutdown: Some(tx),
            task: Some(task),
        };
        server.wait_ready(Duration::from_secs(60)).await;
        server
    }

    async fn wait_ready(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if client::get(self.addr, "/health")
                .await
                .is_ok_and(|r| r.status == 200)
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server not ready within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends the shutdown signal (the server starts draining) without waiting.
    pub fn signal_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Signals shutdown and waits (bounded) for the server to return.
    pub async fn stop(mut self) {
        self.signal_shutdown();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("server did not stop")
                .expect("server task");
        }
    }

    /// One metric's value (first sample whose line starts with `name{` or `name `).
    pub async fn metric(&self, name: &str) -> f64 {
        let text = client::get(self.addr, "/metrics")
            .await
            .expect("GET /metrics")
            .body;
        metric_value(&text, name).unwrap_or_else(|| panic!("metric {name} missing from:\n{text}"))
    }
}

impl TestServer {
    /// Waits (at most `limit`) until metric `name` reads `value`; fails the test otherwise.
    pub async fn wait_metric(&self, name: &str, value: f64, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let now = self.metric(name).await;
            if now == value {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} is {now}, not {value}, after {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.signal_shutdown();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// An engine process, killed on drop so a failing test leaves nothing behind.
pub struct EngineProcess(pub std::process::Child);

impl Drop for EngineProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tokenscale-engine serve` on the real test model on a free port, served as `MODEL_NAME`,
/// with `args` added (for [`spawn_ready`]).
pub fn model_serve_command(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"));
    command
        .args(["serve", "--model"])
        .arg(model_path())
        .args(["--port", "0", "--served-model-name", MODEL_NAME])
        .args(args);
    command
}

/// Starts `command` (a `tokenscale-engine serve … --port 0`), reads the address it says it
/// listens on, keeps draining its stderr, and waits (at most 60 s) until `/health` is 200.
pub async fn spawn_ready(command: &mut std::process::Command) -> (EngineProcess, SocketAddr) {
    use std::io::BufRead;
    let mut child = EngineProcess(
        command
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn tokenscale-engine serve"),
    );
    let stderr = child.0.stderr.take().expect("stderr");
    let addr = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stderr).lines();
        let addr = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("listening on http://").map(str::to_string));
        // Keep draining stderr so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        addr
    })
    .await
    .expect("join")
    .expect("the server never said where it listens");
    let addr: SocketAddr = addr.trim().parse().expect("address");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while client::get(addr, "/health").await.map(|r| r.status) != Ok(200) {
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, addr)
}

/// The value of the first sample of `name` in a Prometheus text exposition.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Runs `promtool check metrics` on `text`. The vLLM metric names carry a colon, which
/// promtool's lint reports ("metric names should not contain ':'") although the text format
/// allows it (colons are reserved for recording rules by convention); those names are fixed by
/// the dashboards that read them, so that one lint is accepted and every other problem fails.
pub fn promtool_check(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool must be installed (scripts/setup installs the Debian package prometheus)",
        );
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let problems: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !(l.starts_with("vllm:") && l.ends_with("metric names should not contain ':'")))
        .collect();
    assert!(
        problems.is_empty(),
        "promtool found problems:\n{}",
        problems.join("\n")
    );
    // Exit 1 is a parse failure; 3 means lint findings only (checked above).
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "promtool could not parse the metrics:\n{report}"
    );
}

/// A serve configuration for the real test model.
pub fn model_config(kv_cache_tokens: usize) -> ServeConfig {
    ServeConfig {
        model: model_path().display().to_string(),
        kv_cache_tokens,
        max_batch_tokens: 256,
        max_num_seqs: 64,
        drain_timeout_s: 30.0,
        served_model_name: Some(MODEL_NAME.into()),
        ..ServeConfig::default()
    }
}

/// The served name the real-model tests use.
pub const MODEL_NAME: &str = "smollm2";

/// Runs `scripts/SCRIPT BASE_URL MODEL` with the project's Python packages (`packages` must be
/// installed in `.cache/tools/python`), against the server at `addr`. Returns whether it
/// succeeded and what it printed (stdout, then stderr).
pub async fn run_python_check(script: &str, packages: &[&str], addr: SocketAddr) -> (bool, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python_path = root.join(".cache/tools/python");
    for package in packages {
        assert!(
            python_path.join(package).exists(),
            "the {package} package is missing from {} (run scripts/setup)",
            python_path.display()
        );
    }
    let script = root.join("scripts").join(script);
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .arg(format!("http://{addr}/v1"))
            .arg(MODEL_NAME)
            .env("PYTHONPATH", python_path)
            .output()
    })
    .await
    .expect("join")
    .expect("python3 must be installed");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), report)
}

/// Starts a server on the real model.
pub async fn start_model_server(config: ServeConfig) -> TestServer {
    let loader_config = config.clone();
    TestServer::start(config, move || server::load_model(&loader_config)).await
}
