//! Shared by the `tokenscale` CLI e2e suites (`bench_e2e`, `up_e2e`): finding the built
//! binaries, child processes that die with the test, loopback HTTP, bounded waits.

#![allow(dead_code)] // each suite uses a different part

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `target/<profile>/NAME`. The suites do not build binaries themselves: run
/// `cargo build --workspace --bins` (CI's `scripts/test` does) before `cargo test`.
pub fn binary(name: &str) -> PathBuf {
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
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    tokenscale_e2e::http::read_response(&mut stream)
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

/// A unique scratch directory under the system temp dir.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenscale-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
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
