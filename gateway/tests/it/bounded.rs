//! Bounded memory under a body flood: 500 clients upload 4 MiB bodies slowly at once; the
//! gateway process buffers at most its body budget and answers the rest 503 before reading
//! their bodies, so its peak memory stays under a stated figure.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::processes::GatewayProcess;
use crate::support::*;

/// Uploads a `size`-byte JSON body in 64 KiB pieces, one every 5 ms, stopping as soon as the
/// gateway answers; returns the status (0 when the connection ended without one).
async fn slow_upload(addr: std::net::SocketAddr, size: usize) -> u16 {
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return 0;
    };
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer key-a\r\n\
         content-type: application/json\r\ncontent-length: {size}\r\n\r\n"
    );
    let prefix = br#"{"model":"m","max_tokens":1,"prompt":""#;
    let suffix = br#""}"#;
    let filler = size - prefix.len() - suffix.len();
    let (mut reader, mut writer) = stream.split();
    let write = async {
        writer.write_all(head.as_bytes()).await?;
        writer.write_all(prefix).await?;
        let piece = vec![b'x'; 64 << 10];
        let mut left = filler;
        while left > 0 {
            let n = left.min(piece.len());
            writer.write_all(&piece[..n]).await?;
            left -= n;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        writer.write_all(suffix).await?;
        // Sent in full: wait for the answer below.
        std::future::pending::<std::io::Result<()>>().await
    };
    let mut answer = [0u8; 12];
    let read = reader.read_exact(&mut answer);
    tokio::pin!(read);
    let read = tokio::select! {
        read = &mut read => read,
        // The gateway stopped reading and closed: its answer is still there to read.
        _ = write => tokio::time::timeout(Duration::from_secs(2), read)
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
    };
    read.ok()
        .and_then(|_| std::str::from_utf8(&answer[9..12]).ok()?.parse().ok())
        .unwrap_or(0)
}

/// Peak resident memory of `pid`, in MiB (`VmHWM`).
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_slow_large_uploads_is_bounded_in_memory() {
    let replica = MockReplica::start().await;
    let yaml = config(
        &[&replica],
        "{}",
        "bounds: {max_buffered_body_bytes: 67108864}\n",
    );
    let gateway = GatewayProcess::start(&yaml).await;
    gateway
        .wait_metric(
            "tokenscale_gateway_replicas{model_name=\"m\",state=\"ready\"}",
            1.0,
        )
        .await;
    let before = peak_rss_mib(gateway.pid());
    let started = Instant::now();
    let uploads: Vec<_> = (0..500)
        .map(|_| tokio::spawn(slow_upload(gateway.addr, 4 << 20)))
        .collect();
    let mut statuses = Vec::new();
    for upload in uploads {
        statuses.push(
            tokio::time::timeout(Duration::from_secs(60), upload)
                .await
                .expect("every upload ends within 60 s")
                .expect("joins"),
        );
    }
    let peak = peak_rss_mib(gateway.pid());
    let served = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 503).count();
    // A refused upload may see its connection reset before it reads the 503 (the gateway
    // closes without reading the body): status 0 here.
    let reset = statuses.iter().filter(|&&s| s == 0).count();
    println!(
        "500 slow 4 MiB uploads in {:.1} s: {served} served, {refused} refused with 503, \
         {reset} reset; gateway peak RSS {before:.0} MiB before, {peak:.0} MiB after",
        started.elapsed().as_secs_f64(),
    );
    assert_eq!(
        served + refused + reset,
        500,
        "no other answer: {statuses:?}"
    );
    assert!(served >= 1, "the gateway still serves during the flood");
    assert!(
        refused + reset >= 100,
        "most uploads are refused early: {statuses:?}"
    );
    // The budget is 64 MiB of bodies; without it the gateway buffered all 2 GiB.
    assert!(peak < 256.0, "peak RSS {peak:.0} MiB, stated bound 256 MiB");
    // And it still answers normally afterwards.
    let after = gateway
        .client
        .post("/v1/completions", Some("key-a"), &completion_body("hi", 2))
        .await;
    assert_eq!(after.status, 200, "{}", after.body);
}
