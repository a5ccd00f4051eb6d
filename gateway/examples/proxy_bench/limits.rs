//! `proxy_bench limits`: the cost of shared limits. Two gateways with the same limited tenant,
//! one with `limits.store: memory`, one with `limits.store: redis` (Debian's `redis-server` on
//! loopback), measured in the same run, interleaved: requests/s at saturation and the p50 each
//! adds over the direct path at a fixed pace. Measures and prints; asserts nothing.
//!
//! `proxy_bench versus OTHER_GATEWAY` measures the same way this build's gateway against
//! another build of it (an earlier commit's), both with `limits.store: memory`: whether a
//! change made the memory path slower, in one window. The config is one both builds read
//! (no keys added since: `bounds`, `tenants[].models`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::procfs::{cpu_ticks, ticks_per_s};
use crate::procs::{Procs, spawn_gateway};
use crate::tail::Tail;
use crate::{Result, addr, free_port, load, median, micros, paced, wait_until_serving};

/// The gateway config with the bench tenant limited (so every request takes its buckets) in
/// `store` (`memory`, or `redis` at `redis_port`); `extra` is config an older build would not
/// read.
fn config(up: u16, store: &str, extra: bool) -> String {
    let key_hash = tokenscale_gateway::auth::hash_key("bench-key");
    let (models, bounds) = if extra {
        (
            "    models: [bench]\n",
            "bounds: {max_connections: 100000, max_in_flight: 100000, max_connections_per_client: 100000, max_in_flight_per_client: 100000}\n",
        )
    } else {
        ("", "")
    };
    format!(
        "models:\n  - name: bench\n    upstreams: [\"http://127.0.0.1:{up}\"]\n    replica_concurrency: 100000\n\
         tenants:\n  - name: bench\n    keys: [\"{key_hash}\"]\n{models}    \
         limits: {{requests_per_minute: 1000000000, input_tokens_per_minute: 1000000000000, output_tokens_per_minute: 1000000000000}}\n\
         queue: {{max_len: 100000}}\n{bounds}{store}"
    )
}

/// Runs the comparison: `seconds` per run, `connections` for saturation.
pub fn run(dir: &Path, gateway_bin: &Path, seconds: u64, connections: usize) -> Result<()> {
    let mut procs = Procs(Vec::new());
    let up = start_upstream(&mut procs)?;
    let redis_port = free_port()?;
    procs.add(
        Command::new("redis-server")
            .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e} (Debian package redis-server)"))?,
    );
    let redis_store =
        format!("limits: {{store: redis, redis_url: \"redis://127.0.0.1:{redis_port}/0\"}}\n");
    let gateways = [
        ("memory", gateway_bin, config(up, "", true)),
        ("redis", gateway_bin, config(up, &redis_store, true)),
    ];
    compare(dir, &mut procs, up, &gateways, seconds, connections)
}

/// `proxy_bench versus`: this build's gateway (`gateway_bin`) against `other_bin`, both with
/// the memory store.
pub fn versus(
    dir: &Path,
    gateway_bin: &Path,
    other_bin: &Path,
    seconds: u64,
    connections: usize,
) -> Result<()> {
    let mut procs = Procs(Vec::new());
    let up = start_upstream(&mut procs)?;
    let gateways = [
        ("other", other_bin, config(up, "", false)),
        ("this", gateway_bin, config(up, "", false)),
    ];
    compare(dir, &mut procs, up, &gateways, seconds, connections)
}

/// The instant upstream (this program, `upstream PORT`); its port.
fn start_upstream(procs: &mut Procs) -> Result<u16> {
    let up = free_port()?;
    procs.add(
        Command::new(std::env::current_exe()?)
            .args(["upstream", &up.to_string()])
            .spawn()?,
    );
    Ok(up)
}

/// Starts the two `gateways` (name, binary, config) in front of the upstream at `up` and
/// measures them against the direct path, interleaved; the second is reported against the
/// first.
fn compare(
    dir: &Path,
    procs: &mut Procs,
    up: u16,
    gateways: &[(&'static str, &Path, String); 2],
    seconds: u64,
    connections: usize,
) -> Result<()> {
    let mut targets: Vec<(&str, SocketAddr, u32)> = vec![("direct", addr(up), 0)];
    for (name, bin, config) in gateways {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join("gateway.yaml"), config)?;
        let port = free_port()?;
        let pid = procs.add(spawn_gateway(bin, &sub, port, None, None)?);
        targets.push((name, addr(port), pid));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        for (name, target, _) in &targets {
            wait_until_serving(name, *target).await?;
            load::saturate(*target, connections, Duration::from_secs(1)).await?; // warm-up
        }
        measure(&targets, Duration::from_secs(seconds), connections).await
    })
}

async fn measure(
    targets: &[(&str, SocketAddr, u32)],
    duration: Duration,
    connections: usize,
) -> Result<()> {
    let (a, b) = (targets[1].0, targets[2].0);
    println!(
        "== {a} and {b}: saturation, {connections} connections, {} s per run, 3 interleaved rounds",
        duration.as_secs()
    );
    let mut rates = vec![Vec::new(); targets.len()];
    let mut cpu_us = vec![Vec::new(); targets.len()];
    for round in 1..=3 {
        for (i, (name, target, pid)) in targets.iter().enumerate() {
            let pids: Vec<u32> = if *pid == 0 { vec![] } else { vec![*pid] };
            let before = cpu_ticks(&pids);
            let (rate, requests) = load::saturate(*target, connections, duration).await?;
            let used_us = (cpu_ticks(&pids) - before) as f64 * 1e6 / ticks_per_s();
            let per_request = used_us / requests.max(1) as f64;
            println!(
                "round {round} {name:>7}: {rate:>9.0} req/s  {per_request:>6.1} µs CPU/request in the gateway"
            );
            rates[i].push(rate);
            cpu_us[i].push(per_request);
        }
    }
    let by_round = |of: &[Vec<f64>]| -> String {
        let ratios: Vec<String> = of[2]
            .iter()
            .zip(&of[1])
            .map(|(y, x)| format!("{:.2}x", y / x))
            .collect();
        ratios.join(" ")
    };
    let medians: Vec<f64> = rates.iter().cloned().map(median).collect();
    println!(
        "median: direct {:.0}, {a} {:.0}, {b} {:.0} req/s; {b} / {a} by round: {}",
        medians[0],
        medians[1],
        medians[2],
        by_round(&rates)
    );
    println!(
        "CPU per request: {a} {:.1} µs, {b} {:.1} µs (medians); {b} / {a} by round: {}",
        median(cpu_us[1].clone()),
        median(cpu_us[2].clone()),
        by_round(&cpu_us)
    );
    let rate = medians[1] / 4.0;
    println!(
        "== {a} and {b}: latency at {rate:.0} req/s (a quarter of {a}'s saturation), 64 connections"
    );
    let mut p50s = vec![Vec::new(); targets.len()];
    for round in 1..=3 {
        for (i, (name, target, _)) in targets.iter().enumerate() {
            let target = *target;
            let samples =
                tokio::task::spawn_blocking(move || paced::run(target, 64, rate, duration))
                    .await??;
            let tail = Tail::of(&samples);
            println!(
                "round {round} {name:>7}: p50 {:>7.1} µs  p99 {:>7.1} µs  ({} requests)",
                micros(tail.p50),
                micros(tail.p99),
                tail.requests
            );
            p50s[i].push(micros(tail.p50));
        }
    }
    let added =
        |i: usize| -> f64 { median(p50s[i].iter().zip(&p50s[0]).map(|(t, d)| t - d).collect()) };
    println!(
        "p50 added over direct (median of rounds): {a} {:.1} µs, {b} {:.1} µs ({b} / {a}: {:.2}x)",
        added(1),
        added(2),
        added(2) / added(1)
    );
    Ok(())
}
