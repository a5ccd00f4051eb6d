//! Real processes for the cluster tests: Debian's `redis-server` on a free loopback port, and
//! gateway processes (this package's binary) started from a YAML file. Both are killed when
//! dropped; every wait is bounded.

use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::TestClient;

/// A free loopback port (bound then released: another process could take it, rarely).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A `redis-server` with no persistence, owned by the test.
pub struct Redis {
    child: Option<Child>,
    /// Its port.
    pub port: u16,
}

impl Redis {
    /// Starts Redis on `port` (a free one when `None`) and waits until it answers.
    pub async fn start(port: Option<u16>) -> Self {
        let port = port.unwrap_or_else(free_port);
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}): scripts/setup installs it (Debian redis-server)")
            });
        let redis = Self {
            child: Some(child),
            port,
        };
        let started = Instant::now();
        while !redis.answers_ping().await {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not answer on port {port} within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        redis
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    async fn answers_ping(&self) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await else {
            return false;
        };
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").await.is_ok()
            && tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut reply))
                .await
                .is_ok_and(|r| r.is_ok())
            && &reply == b"+PONG\r\n"
    }

    /// Kills Redis at once (SIGKILL: no goodbye to its clients).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A gateway process.
pub struct GatewayProcess {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// A client for it.
    pub client: TestClient,
    _dir: tokenscale_scratch::Scratch,
}

impl GatewayProcess {
    /// Starts `tokenscale-gateway` with `yaml` and one worker; waits for `/health`.
    pub async fn start(yaml: &str) -> Self {
        Self::start_with_env(yaml, &[]).await
    }

    /// [`GatewayProcess::start`] with `env` (`TOKENSCALE_GATEWAY_*` settings) set.
    pub async fn start_with_env(yaml: &str, env: &[(&str, &str)]) -> Self {
        let dir = tokenscale_scratch::scratch!("gateway-it");
        let config = dir.join("gateway.yaml");
        std::fs::write(&config, yaml).expect("write the config");
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let child = Command::new(env!("CARGO_BIN_EXE_tokenscale-gateway"))
            .arg("--config")
            .arg(&config)
            .args(["--listen", &addr.to_string(), "--workers", "1"])
            .args(["--admin-listen", &admin.to_string()])
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the gateway binary");
        let gateway = Self {
            child,
            addr,
            client: TestClient::new(addr).with_admin(admin),
            _dir: dir,
        };
        let started = Instant::now();
        loop {
            let up = tokio::net::TcpStream::connect(addr).await.is_ok();
            if up && gateway.client.send("GET", "/health", &[], "").await.status == 200 {
                return gateway;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the gateway did not come up within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its `/metrics` text.
    pub async fn metrics(&self) -> String {
        self.client.metrics().await
    }

    /// The value of the sample `series` (its whole name and labels) on `/metrics`.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self.metrics().await;
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
    }

    /// Waits (bounded) until `series` reads `value`.
    pub async fn wait_metric(&self, series: &str, value: f64) {
        let started = Instant::now();
        while self.metric(series).await != Some(value) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{series} never became {value}: {}",
                self.metrics().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM, as the kubelet does to a pod it stops.
    pub fn terminate(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {}", self.pid());
    }

    /// Its exit status once it has exited; `None` while it runs.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("the gateway's status")
    }

    /// Waits (at most `limit`) for it to exit; `None` if it still runs then.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
