//! Proxy overhead benchmark: the gateway (every layer on) beside nginx as a plain reverse
//! proxy, against an instant upstream on loopback: requests/s at saturation, the latency each
//! adds at a quarter and half of the gateway's saturation, the same again with each proxy
//! alone on a core of its own (`taskset`; the load generator and the upstream on the other
//! cores), and the gateway's memory with 10,000 open streams. Measures and prints; asserts
//! nothing. Each paced run also says whether its slowest 1% is spread over the run or made of
//! a few bursts (the core stopped: see `tail.rs`).
//!
//! ```sh
//! cargo build --profile dist -p tokenscale-gateway --bins --examples
//! target/dist/examples/proxy_bench [SECONDS] [CONNECTIONS] [STREAMS]
//! ```
//! Needs `nginx` on PATH (Debian package) and, for the dedicated-core runs, `taskset`
//! (util-linux). The load generators are this program's own: a closed loop of hyper
//! keep-alive connections for saturation, an open loop in the manner of wrk2 for latency.
//!
//! To profile one proxy alone, `proxy_bench upstream PORT` runs the instant upstream and
//! `proxy_bench load HOST:PORT [SECONDS] [CONNECTIONS] [RATE]` only drives load and prints
//! requests/s (or, given a RATE, latency quantiles at that pace).
//!
//! `proxy_bench limits [SECONDS] [CONNECTIONS]` compares `limits.store: memory` with
//! `limits.store: redis` (needs `redis-server`) in the same run: see `limits.rs`.
//! `proxy_bench versus OTHER_GATEWAY [SECONDS] [CONNECTIONS]` compares this build's gateway
//! with another build's (an earlier commit's), interleaved.

mod limits;
mod load;
mod paced;
mod procfs;
mod procs;
mod tail;
mod upstream;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use procfs::{CoreTicks, cpu_ticks, rss_kib, ticks_per_s, with_children};
use procs::{CoreSplit, Procs, spawn_gateway, spawn_nginx};
use tail::Tail;

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
            let tail = Tail::of(&paced::run(target, connections, rate, duration)?);
            println!(
                "{target}: p50 {:.1} µs  p99 {:.1} µs  p99.9 {:.1} µs  ({} requests at {rate} req/s; {})",
                micros(tail.p50),
                micros(tail.p99),
                micros(tail.p999),
                tail.requests,
                tail.bursts_text()
            );
            return Ok(());
        }
        let (rate, requests) = runtime.block_on(load::saturate(target, connections, duration))?;
        println!("{target}: {rate:.0} req/s ({requests} requests)");
        return Ok(());
    }
    if let Some(mode @ ("limits" | "versus")) = args.get(1).map(String::as_str) {
        let other = (mode == "versus")
            .then(|| args.get(2).map(PathBuf::from).ok_or("versus OTHER_GATEWAY"))
            .transpose()?;
        let rest = if other.is_some() { 3 } else { 2 };
        let seconds: u64 = args.get(rest).and_then(|s| s.parse().ok()).unwrap_or(5);
        let connections: usize = args
            .get(rest + 1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(64);
        let dir =
            std::env::temp_dir().join(format!("tokenscale-limits-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let result = match other {
            Some(other) => limits::versus(&dir, &gateway_bin()?, &other, seconds, connections),
            None => limits::run(&dir, &gateway_bin()?, seconds, connections),
        };
        let _ = std::fs::remove_dir_all(&dir);
        return result;
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

/// The gateway binary beside this example's folder (`--bins` builds it).
fn gateway_bin() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("tokenscale-gateway"))
        .ok_or("exe dir")?)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The processes under test and where they listen.
struct Setup {
    up: u16,
    upstream_pid: u32,
    nginx: u16,
    nginx_pid: u32,
    gateway: u16,
    gateway_pid: u32,
    /// One-worker copies of both proxies on a core of their own, if the machine allows.
    dedicated: Option<Dedicated>,
}

/// Both proxies with one worker each on the last core (see [`CoreSplit`]).
struct Dedicated {
    split: CoreSplit,
    nginx: u16,
    gateway: u16,
}

fn run(dir: &Path, seconds: u64, connections: usize, streams: usize) -> Result<()> {
    let up = free_port()?;
    let exe = std::env::current_exe()?;
    let gateway_bin = gateway_bin()?;
    let mut procs = Procs(Vec::new());
    let upstream_pid = procs.add(
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
         queue: {{max_len: 100000}}\nbounds: {{max_connections: 100000, max_in_flight: 100000, max_connections_per_client: 100000, max_in_flight_per_client: 100000}}\n"
    );
    std::fs::write(dir.join("gateway.yaml"), gateway_yaml)?;
    let (gateway, nginx) = (free_port()?, free_port()?);
    let gateway_pid = procs.add(spawn_gateway(&gateway_bin, dir, gateway, None, None)?);
    let nginx_pid = procs.add(spawn_nginx(dir, "nginx", nginx, up, 2, None)?);
    let dedicated = match CoreSplit::detect() {
        Some(split) => {
            let own = split.own.to_string();
            let (gateway, nginx) = (free_port()?, free_port()?);
            procs.add(spawn_gateway(
                &gateway_bin,
                dir,
                gateway,
                Some(1),
                Some(&own),
            )?);
            procs.add(spawn_nginx(
                dir,
                "nginx-dedicated",
                nginx,
                up,
                1,
                Some(&own),
            )?);
            Some(Dedicated {
                split,
                nginx,
                gateway,
            })
        }
        None => {
            println!("(one core, or no taskset: the dedicated-core latency runs are skipped)");
            None
        }
    };
    let setup = Setup {
        up,
        upstream_pid,
        nginx,
        nginx_pid,
        gateway,
        gateway_pid,
        dedicated,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(measure(&setup, seconds, connections, streams))
}

fn addr(port: u16) -> SocketAddr {
    ([127, 0, 0, 1], port).into()
}

/// The direct path, nginx and the gateway, once each answers.
async fn serving_targets(
    up: u16,
    nginx: u16,
    gateway: u16,
) -> Result<[(&'static str, SocketAddr); 3]> {
    let targets = [
        ("direct", addr(up)),
        ("nginx", addr(nginx)),
        ("gateway", addr(gateway)),
    ];
    for (name, target) in targets {
        wait_until_serving(name, target).await?;
    }
    Ok(targets)
}

async fn measure(setup: &Setup, seconds: u64, connections: usize, streams: usize) -> Result<()> {
    let targets = serving_targets(setup.up, setup.nginx, setup.gateway).await?;
    let gateway_pid = setup.gateway_pid;
    let duration = Duration::from_secs(seconds);
    let nginx_pids = with_children(setup.nginx_pid);
    println!(
        "== saturation: {connections} keep-alive connections, {seconds} s per run, 3 interleaved rounds, non-streaming chat completions"
    );
    // Rounds interleave the targets so background load on a shared machine hits all alike;
    // CPU time per request (from /proc) is the contention-proof figure.
    let mut rates = vec![Vec::new(); 3];
    let mut cpu_us = vec![Vec::new(); 3];
    for (_, target) in &targets {
        load::saturate(*target, connections, Duration::from_secs(1)).await?; // warm-up
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
        latency_rounds(&targets, rates[2] / fraction, 64, duration, None).await?;
    }

    // Before the memory test: tearing down 10,000 streams disturbs the runs after it.
    if let Some(dedicated) = &setup.dedicated {
        dedicated_core(setup, dedicated, duration).await?;
    }

    println!("== memory: {streams} concurrent open streams through the gateway (h2c upstream)");
    let before = rss_kib(gateway_pid)?;
    let open = load::open_streams(addr(setup.gateway), "bench-h2", streams).await?;
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

/// Latency with each proxy alone on a core (one worker), the load generator and the
/// upstream on the others: what a proxy adds when it does not wait for a core behind them,
/// as in a cluster where the gateway has CPUs of its own. The load is a quarter and half of
/// this one-core gateway's saturation, measured here.
async fn dedicated_core(setup: &Setup, dedicated: &Dedicated, duration: Duration) -> Result<()> {
    let split = &dedicated.split;
    split.move_to_rest(std::process::id())?;
    split.move_to_rest(setup.upstream_pid)?;
    let targets = serving_targets(setup.up, dedicated.nginx, dedicated.gateway).await?;
    load::saturate(targets[2].1, 32, Duration::from_secs(1)).await?; // warm-up
    let mut rates = Vec::new();
    for _ in 0..3 {
        let busy = CoreTicks::now(Some(split.own));
        rates.push(load::saturate(targets[2].1, 32, duration).await?.0);
        println!(
            "dedicated core {}: gateway (1 worker) saturates at {:.0} req/s (its core {:.0}% busy)",
            split.own,
            rates[rates.len() - 1],
            busy.busy_since() * 100.0
        );
    }
    let saturation = median(rates);
    for fraction in [4.0, 2.0] {
        latency_rounds(
            &targets,
            saturation / fraction,
            64,
            duration,
            Some(split.own),
        )
        .await?;
    }
    Ok(())
}

/// Three interleaved rounds of paced load at `rate` on every target; prints each run and
/// the latency nginx and the gateway add over the direct path (median of the rounds).
async fn latency_rounds(
    targets: &[(&str, SocketAddr); 3],
    rate: f64,
    connections: usize,
    duration: Duration,
    proxy_core: Option<usize>,
) -> Result<()> {
    let (shared, busy_of) = match proxy_core {
        Some(core) => (format!(", proxies alone on core {core}"), "proxy core"),
        None => (String::new(), "machine"),
    };
    println!(
        "== latency at {rate:.0} req/s, {connections} connections, {} s per run, 3 interleaved rounds{shared}",
        duration.as_secs()
    );
    let mut p50s = vec![Vec::new(); 3];
    let mut p99s = vec![Vec::new(); 3];
    let mut typical = vec![Vec::new(); 3];
    for round in 1..=3 {
        for (i, (name, target)) in targets.iter().enumerate() {
            let target = *target;
            let before = CoreTicks::now(proxy_core);
            let samples = tokio::task::spawn_blocking(move || {
                paced::run(target, connections, rate, duration)
            })
            .await??;
            let busy = before.busy_since();
            let tail = Tail::of(&samples);
            println!(
                "round {round} {name:>8}: p50 {:>7.1} µs  p99 {:>7.1} µs  ({} requests; {busy_of} {:.0}% busy; {})",
                micros(tail.p50),
                micros(tail.p99),
                tail.requests,
                busy * 100.0,
                tail.bursts_text()
            );
            p50s[i].push(micros(tail.p50));
            p99s[i].push(micros(tail.p99));
            typical[i].push(micros(tail.typical_window_p99));
        }
    }
    for (i, name) in [(1, "nginx"), (2, "gateway")] {
        let added =
            |q: &[Vec<f64>]| -> Vec<f64> { q[i].iter().zip(&q[0]).map(|(t, d)| t - d).collect() };
        let (add50, add99) = (added(&p50s), added(&p99s));
        println!(
            "{name:>8} adds: p50 {:>+7.1} µs, p99 {:>+7.1} µs (median of rounds; p99 by round: {}; typical 100 ms p99 {:+.0} µs)",
            median(add50),
            median(add99.clone()),
            add99
                .iter()
                .map(|a| format!("{a:+.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            median(added(&typical))
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

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
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
