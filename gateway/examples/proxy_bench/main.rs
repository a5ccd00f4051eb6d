//! Proxy overhead benchmark: the gateway (every layer on) beside nginx as a plain reverse
//! proxy, against an instant upstream on loopback; then the gateway's memory with 10,000
//! open streams. Measures and prints; asserts nothing.
//!
//! ```sh
//! cargo build --profile dist -p tokenscale-gateway --bins --examples
//! target/dist/examples/proxy_bench [SECONDS] [CONNECTIONS] [STREAMS]
//! ```
//! Needs `nginx` on PATH (Debian package). The load generator is this program's own Rust
//! loop (hyper HTTP/1.1 keep-alive connections), not wrk.
//!
//! To profile one proxy alone, `proxy_bench upstream PORT` runs the instant upstream and
//! `proxy_bench load HOST:PORT [SECONDS] [CONNECTIONS] [RATE]` only drives load and prints
//! requests/s (or, given a RATE, latency quantiles at that pace).

mod load;
mod paced;
mod upstream;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("upstream") {
        let port = args
            .get(2)
            .and_then(|p| p.parse().ok())
            .ok_or("upstream PORT")?;
        return Ok(upstream::run(port, 2)?);
    }
    if args.get(1).map(String::as_str) == Some("load") {
        let target: SocketAddr = args
            .get(2)
            .and_then(|a| a.parse().ok())
            .ok_or("load HOST:PORT [SECONDS] [CONNECTIONS] [RATE]")?;
        let seconds: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(10);
        let connections: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(32);
        let paced: Option<f64> = args.get(5).and_then(|s| s.parse().ok());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let duration = Duration::from_secs(seconds);
        if let Some(rate) = paced {
            let lat = paced::run(target, connections, rate, duration)?;
            let q = |q| micros(load::quantile(&lat, q));
            println!(
                "{target}: p50 {:.1} µs  p99 {:.1} µs  p99.9 {:.1} µs  ({} requests at {rate} req/s)",
                q(0.5),
                q(0.99),
                q(0.999),
                lat.len()
            );
            return Ok(());
        }
        let (rate, requests) = runtime.block_on(load::saturate(target, connections, duration))?;
        println!("{target}: {rate:.0} req/s ({requests} requests)");
        return Ok(());
    }
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let connections: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    let streams: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let dir = std::env::temp_dir().join(format!("tokenscale-proxy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run(&dir, seconds, connections, streams);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Child processes, killed on drop.
struct Procs(Vec<Child>);

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

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn run(dir: &Path, seconds: u64, connections: usize, streams: usize) -> Result<()> {
    let (up, nginx_port, gw_port) = (free_port()?, free_port()?, free_port()?);
    let exe = std::env::current_exe()?;
    let gateway_bin: PathBuf = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("tokenscale-gateway"))
        .ok_or("exe dir")?;
    let mut procs = Procs(Vec::new());
    procs.0.push(
        Command::new(&exe)
            .args(["upstream", &up.to_string()])
            .spawn()?,
    );

    let key_hash = tokenscale_gateway::auth::hash_key("bench-key");
    let gateway_yaml = format!(
        "models:\n  - name: bench\n    upstreams: [\"http://127.0.0.1:{up}\"]\n    replica_concurrency: 100000\n\
         \x20 - name: bench-h2\n    upstreams: [\"h2c://127.0.0.1:{up}\"]\n    replica_concurrency: 100000\n\
         tenants:\n  - name: bench\n    keys: [\"{key_hash}\"]\n    limits: {{requests_per_minute: 1000000000, \
         input_tokens_per_minute: 1000000000000, output_tokens_per_minute: 1000000000000}}\n\
         queue: {{max_len: 100000}}\n"
    );
    std::fs::write(dir.join("gateway.yaml"), gateway_yaml)?;
    let gateway = Command::new(&gateway_bin)
        .args(["--listen", &format!("127.0.0.1:{gw_port}"), "--config"])
        .arg(dir.join("gateway.yaml"))
        .env("RUST_LOG", "warn")
        .spawn()
        .map_err(|e| format!("{}: {e} (build with --bins)", gateway_bin.display()))?;
    let gateway_pid = gateway.id();
    procs.0.push(gateway);

    let nginx_conf = format!(
        "worker_processes 2;\ndaemon off;\nuser root;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
events {{ worker_connections 8192; }}\n\
http {{\n  access_log off;\n  keepalive_requests 100000000;\n  client_body_temp_path {dir}/body;\n  proxy_temp_path {dir}/proxy;\n\
  fastcgi_temp_path {dir}/fcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n\
  upstream up {{ server 127.0.0.1:{up}; keepalive 256; }}\n\
  server {{\n    listen 127.0.0.1:{nginx_port};\n    location / {{\n      proxy_pass http://up;\n\
      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}\n  }}\n}}\n",
        dir = dir.display()
    );
    std::fs::write(dir.join("nginx.conf"), nginx_conf)?;
    let nginx_cmd = Command::new("nginx")
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-p")
        .arg(dir)
        .stderr(Stdio::inherit())
        .spawn()?;
    let nginx_pid = nginx_cmd.id();
    procs.0.push(nginx_cmd);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(measure(
        up,
        nginx_port,
        gw_port,
        gateway_pid,
        nginx_pid,
        seconds,
        connections,
        streams,
    ))
}

#[allow(clippy::too_many_arguments)] // ports and pids of the processes it measures
async fn measure(
    up: u16,
    nginx: u16,
    gw: u16,
    gateway_pid: u32,
    nginx_pid: u32,
    seconds: u64,
    connections: usize,
    streams: usize,
) -> Result<()> {
    let addr = |port: u16| -> SocketAddr { ([127, 0, 0, 1], port).into() };
    let targets = [
        ("direct", addr(up)),
        ("nginx", addr(nginx)),
        ("gateway", addr(gw)),
    ];
    for (name, target) in targets {
        wait_until_serving(name, target).await?;
    }
    let duration = Duration::from_secs(seconds);
    let nginx_pids = with_children(nginx_pid);
    println!(
        "== saturation: {connections} keep-alive connections, {seconds} s per run, 3 interleaved rounds, non-streaming chat completions"
    );
    // Rounds interleave the targets so background load on a shared machine hits all alike;
    // CPU time per request (from /proc) is the contention-proof figure.
    let mut rates = vec![Vec::new(); 3];
    let mut cpu_us = vec![Vec::new(); 3];
    for (i, (_, target)) in targets.iter().enumerate() {
        load::saturate(*target, connections, Duration::from_secs(1)).await?; // warm-up
        let _ = i;
    }
    for round in 1..=3 {
        for (i, (name, target)) in targets.iter().enumerate() {
            let pids: Vec<u32> = match i {
                0 => vec![],
                1 => nginx_pids.clone(),
                _ => vec![gateway_pid],
            };
            let before = cpu_ticks(&pids);
            let (rate, requests) = load::saturate(*target, connections, duration).await?;
            let used_us = (cpu_ticks(&pids) - before) as f64 * 1e6 / ticks_per_s();
            let per_request = if pids.is_empty() {
                0.0
            } else {
                used_us / requests.max(1) as f64
            };
            println!(
                "round {round} {name:>8}: {rate:>9.0} req/s  {per_request:>6.1} µs CPU/request in the proxy"
            );
            rates[i].push(rate);
            cpu_us[i].push(per_request);
        }
    }
    // Each round's gateway/nginx ratio pairs runs seconds apart, so the machine's drift
    // cancels within a pair; the median of the pairs is the headline ratio.
    let paired: Vec<f64> = rates[2].iter().zip(&rates[1]).map(|(g, n)| g / n).collect();
    let paired_cpu: Vec<f64> = cpu_us[2]
        .iter()
        .zip(&cpu_us[1])
        .map(|(g, n)| g / n)
        .collect();
    let rates: Vec<f64> = rates.into_iter().map(median).collect();
    let cpu: Vec<f64> = cpu_us.into_iter().map(median).collect();
    println!(
        "median: direct {:.0} req/s, nginx {:.0} req/s ({:.1} µs CPU/req), gateway {:.0} req/s ({:.1} µs CPU/req)",
        rates[0], rates[1], cpu[1], rates[2], cpu[2]
    );
    println!(
        "gateway / nginx, paired by round: {} req/s (median {:.2}x), {} CPU per request (median {:.2}x)",
        ratios(&paired),
        median(paired.clone()),
        ratios(&paired_cpu),
        median(paired_cpu.clone())
    );

    // Open-loop latency at a quarter and at half the gateway's saturation. 64 connections:
    // with 16, half load kept ~10 of them busy on average (Little's law), so any hiccup
    // queued requests in the load generator and the p99 measured that queue.
    for fraction in [4.0, 2.0] {
        latency_rounds(&targets, rates[2] / fraction, 64, duration).await?;
    }

    println!("== memory: {streams} concurrent open streams through the gateway (h2c upstream)");
    let before = rss_kib(gateway_pid)?;
    let open = load::open_streams(addr(gw), "bench-h2", streams).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(gateway_pid)?;
    println!(
        "gateway RSS: {:.1} MiB idle, {:.1} MiB with {} open streams ({:.1} KiB per stream)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        open.len(),
        (after.saturating_sub(before)) as f64 / open.len().max(1) as f64
    );
    drop(open);
    Ok(())
}

/// Three interleaved rounds of paced load at `rate` on every target; prints each run and
/// the latency nginx and the gateway add over the direct path (median of the rounds).
async fn latency_rounds(
    targets: &[(&str, SocketAddr); 3],
    rate: f64,
    connections: usize,
    duration: Duration,
) -> Result<()> {
    println!(
        "== latency at {rate:.0} req/s, {connections} connections, {} s per run, 3 interleaved rounds",
        duration.as_secs()
    );
    let mut p50s = vec![Vec::new(); 3];
    let mut p99s = vec![Vec::new(); 3];
    for round in 1..=3 {
        for (i, (name, target)) in targets.iter().enumerate() {
            let target = *target;
            let before = MachineTicks::now();
            let lat = tokio::task::spawn_blocking(move || {
                paced::run(target, connections, rate, duration)
            })
            .await??;
            let busy = before.busy_since();
            let (p50, p99) = (load::quantile(&lat, 0.5), load::quantile(&lat, 0.99));
            println!(
                "round {round} {name:>8}: p50 {:>7.1} µs  p99 {:>7.1} µs  ({} requests; machine {:.0}% busy)",
                micros(p50),
                micros(p99),
                lat.len(),
                busy * 100.0
            );
            p50s[i].push(micros(p50));
            p99s[i].push(micros(p99));
        }
    }
    for (i, name) in [(1, "nginx"), (2, "gateway")] {
        let added =
            |q: &[Vec<f64>]| -> Vec<f64> { q[i].iter().zip(&q[0]).map(|(t, d)| t - d).collect() };
        let (add50, add99) = (added(&p50s), added(&p99s));
        println!(
            "{name:>8} adds: p50 {:>+7.1} µs, p99 {:>+7.1} µs (median of rounds; p99 by round: {})",
            median(add50),
            median(add99.clone()),
            add99
                .iter()
                .map(|a| format!("{a:+.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

fn ratios(values: &[f64]) -> String {
    values
        .iter()
        .map(|r| format!("{r:.2}x"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Clock ticks per second of /proc's CPU times.
fn ticks_per_s() -> f64 {
    100.0
}

/// utime + stime of `pids`, in clock ticks.
fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the `(comm)`: state is field 3; utime and stime are 14 and 15.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}

/// The whole machine's CPU time from `/proc/stat`: the load generator, the upstream and the
/// proxy share two cores, so a latency figure means little without how busy they were.
struct MachineTicks {
    busy: u64,
    total: u64,
}

impl MachineTicks {
    fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
        let total: u64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
        Self {
            busy: total - idle,
            total,
        }
    }

    /// The fraction of the machine's CPU time that was busy since `self`.
    fn busy_since(&self) -> f64 {
        let now = Self::now();
        (now.busy - self.busy) as f64 / (now.total - self.total).max(1) as f64
    }
}

/// `pid` and its direct children (nginx's master and workers).
fn with_children(pid: u32) -> Vec<u32> {
    std::thread::sleep(Duration::from_millis(300));
    let mut pids = vec![pid];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            pids.push(child);
        }
    }
    pids
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Resident set size of a process, from /proc, in KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .ok_or("VmRSS value")?
        .parse()?)
}

async fn wait_until_serving(name: &str, target: SocketAddr) -> Result<()> {
    for _ in 0..100 {
        if load::saturate(target, 1, Duration::from_millis(10))
            .await
            .is_ok_and(|(rate, _)| rate > 0.0)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{name} at {target} never served a request").into())
}
