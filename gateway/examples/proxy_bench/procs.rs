//! The processes the benchmark runs: the proxies under test, each optionally held to some
//! cores with `taskset` (util-linux).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::Result;

/// Child processes, stopped on drop.
pub struct Procs(pub Vec<Child>);

impl Procs {
    /// Keeps `child` to stop at the end; returns its pid.
    pub fn add(&mut self, child: Child) -> u32 {
        let pid = child.id();
        self.0.push(child);
        pid
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: nginx's master must stop its workers, the gateway drains.
        for child in &mut self.0 {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
        }
        for child in &mut self.0 {
            for _ in 0..50 {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How the cores are shared out for the dedicated-core latency runs: the proxy under test
/// alone on the last core, everything else (load generator, upstream) on the rest.
#[derive(Debug, Clone)]
pub struct CoreSplit {
    /// The proxy's core.
    pub own: usize,
    /// The other cores, as a `taskset` list.
    pub rest: String,
}

impl CoreSplit {
    /// `None` on a single core, or without `taskset`.
    pub fn detect() -> Option<Self> {
        let cores = std::thread::available_parallelism().ok()?.get();
        let has_taskset = Command::new("taskset")
            .arg("-V")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        (cores >= 2 && has_taskset).then(|| Self {
            own: cores - 1,
            rest: if cores == 2 {
                "0".into()
            } else {
                format!("0-{}", cores - 2)
            },
        })
    }

    /// Holds every thread of `pid` (and threads it starts later) to the other cores.
    pub fn move_to_rest(&self, pid: u32) -> Result<()> {
        let status = Command::new("taskset")
            .args(["-a", "-p", "-c", &self.rest, &pid.to_string()])
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            return Err(format!("taskset could not move process {pid}").into());
        }
        Ok(())
    }
}

/// `program`, on `cores` (a `taskset` list) when given.
fn command(program: &Path, cores: Option<&str>) -> Command {
    match cores {
        Some(cores) => {
            let mut command = Command::new("taskset");
            command.args(["-c", cores]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// The gateway on `port` with the config in `dir`, `workers` threads (default: one per
/// core it may use).
pub fn spawn_gateway(
    bin: &Path,
    dir: &Path,
    port: u16,
    workers: Option<usize>,
    cores: Option<&str>,
) -> Result<Child> {
    let mut gateway = command(bin, cores);
    gateway
        .args(["--listen", &format!("127.0.0.1:{port}"), "--config"])
        .arg(dir.join("gateway.yaml"))
        .env("RUST_LOG", "warn");
    if let Some(workers) = workers {
        gateway.args(["--workers", &workers.to_string()]);
    }
    Ok(gateway
        .spawn()
        .map_err(|e| format!("{}: {e} (build with --bins)", bin.display()))?)
}

/// nginx as a plain keep-alive reverse proxy to `upstream`, on `port`, with `workers`
/// worker processes; its files go under `dir/name`.
pub fn spawn_nginx(
    dir: &Path,
    name: &str,
    port: u16,
    upstream: u16,
    workers: usize,
    cores: Option<&str>,
) -> Result<Child> {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir)?;
    let conf = format!(
        "worker_processes {workers};\ndaemon off;\nuser root;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
events {{ worker_connections 8192; }}\n\
http {{\n  access_log off;\n  keepalive_requests 100000000;\n  client_body_temp_path {dir}/body;\n  proxy_temp_path {dir}/proxy;\n\
  fastcgi_temp_path {dir}/fcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n\
  upstream up {{ server 127.0.0.1:{upstream}; keepalive 256; }}\n\
  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://up;\n\
      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}\n  }}\n}}\n",
        dir = dir.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf)?;
    Ok(command(Path::new("nginx"), cores)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-p")
        .arg(&dir)
        .stderr(Stdio::inherit())
        .spawn()?)
}
