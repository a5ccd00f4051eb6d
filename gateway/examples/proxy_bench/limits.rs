//! `proxy_bench limits`: the cost of shared limits. Two gateways with the same limited tenant,
//! one with `limits.store: memory`, one with `limits.store: redis` (Debian's `redis-server` on
//! loopback), measured in the same run, interleaved: requests/s at saturation and the p50 each
//! adds over the direct path at a fixed pace. Measures and prints; asserts nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::procs::{Procs, spawn_gateway};
use crate::tail::Tail;
use crate::{Result, addr, free_port, load, median, micros, paced, wait_until_serving};

/// The gateway config with the bench tenant limited (so every request takes its buckets) in
/// `store` (`memory`, or `redis` at `redis_port`).
fn config(up: u16, store: &str) -> String {
    let key_hash = tokenscale_gateway::auth::hash_key("bench-key");
    format!(
        "models:\n  - name: bench\n    upstreams: [\"http://127.0.0.1:{up}\"]\n    replica_concurrency: 100000\n\
         tenants:\n  - name: bench\n    keys: [\"{key_hash}\"]\n    models: [bench]\n    \
         limits: {{requests_per_minute: 1000000000, input_tokens_per_minute: 1000000000000, output_tokens_per_minute: 1000000000000}}\n\
         queue: {{max_len: 100000}}\nbounds: {{max_connections: 100000, max_in_flight: 100000}}\n{store}"
    )
}

/// Runs the comparison: `seconds` per run, `connections` for saturation.
pub fn run(dir: &Path, gateway_bin: &Path, seconds: u64, connections: usize) -> Result<()> {
    let exe = std::env::current_exe()?;
    let mut procs = Procs(Vec::new());
    let up = free_port()?;
    procs.add(
        Command::new(&exe)
            .args(["upstream", &up.to_string()])
            .spawn()?,
    );
    let redis_port = free_port()?;
    procs.add(
        Command::new("redis-server")
            .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e} (Debian package redis-server)"))?,
    );
    let mut targets: Vec<(&str, SocketAddr, u32)> = vec![("direct", addr(up), 0)];
    let redis_store =
        format!("limits: {{store: redis, redis_url: \"redis://127.0.0.1:{redis_port}/0\"}}\n");
    for (name, store) in [("memory", String::new()), ("redis", redis_store)] {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join("gateway.yaml"), config(up, &store))?;
        let port = free_port()?;
        let pid = procs.add(spawn_gateway(gateway_bin, &sub, port, None, None)?);
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
    println!(
        "== limits store: saturation, {connections} connections, {} s per run, 3 interleaved rounds",
        duration.as_secs()
    );
    let mut rates = vec![Vec::new(); targets.len()];
    for round in 1..=3 {
        for (i, (name, target, _)) in targets.iter().enumerate() {
            let (rate, _) = load::saturate(*target, connections, duration).await?;
            println!("round {round} {name:>7}: {rate:>9.0} req/s");
            rates[i].push(rate);
        }
    }
    let paired: Vec<String> = rates[2]
        .iter()
        .zip(&rates[1])
        .map(|(r, m)| format!("{:.2}x", r / m))
        .collect();
    let medians: Vec<f64> = rates.iter().cloned().map(median).collect();
    println!(
        "median: direct {:.0}, memory {:.0}, redis {:.0} req/s; redis / memory by round: {}",
        medians[0],
        medians[1],
        medians[2],
        paired.join(" ")
    );
    let rate = medians[1] / 4.0;
    println!(
        "== limits store: latency at {rate:.0} req/s (a quarter of memory's saturation), 64 connections"
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
        "p50 added over direct (median of rounds): memory {:.1} µs, redis {:.1} µs (+{:.1} µs for the Redis round trip)",
        added(1),
        added(2),
        added(2) - added(1)
    );
    Ok(())
}
