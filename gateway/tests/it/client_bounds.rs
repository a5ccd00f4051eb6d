//! Per-client bounds over HTTP/2: a client's streams past its in-flight cap get 429 (counted
//! for the address a trusted proxy forwards for), and a stream whose client stops granting it
//! window (the socket stays writable) is cut after the write timeout, its slot freed.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::support::*;

/// An h2c connection to `addr` whose streams get `window` bytes of flow-control window.
async fn h2(
    addr: std::net::SocketAddr,
    window: u32,
) -> (
    http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(window)
        .handshake(TokioIo::new(stream))
        .await
        .expect("h2c handshake");
    (sender, tokio::spawn(connection))
}

/// A completion from `client` (as `X-Forwarded-For` names it).
fn completion(
    addr: std::net::SocketAddr,
    client: &str,
    body: &serde_json::Value,
) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://{addr}/v1/completions"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer key-a")
        .header("x-forwarded-for", client)
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_past_a_forwarded_clients_cap_get_429() {
    let replica = MockReplica::start().await;
    replica.state.delay_ms.store(800, Ordering::SeqCst);
    let extra = "bounds: {max_in_flight_per_client: 2}\ntrusted_proxies: [127.0.0.0/8]\n";
    let (running, _) = gateway(&config(&[&replica], "{}", extra)).await;
    wait_ready(&running, "m", 1).await;
    let (sender, _connection) = h2(running.addr, 65_535).await;
    let body = completion_body("x", 4);
    let held: Vec<_> = (0..2)
        .map(|_| {
            let mut sender = sender.clone();
            let request = completion(running.addr, "198.51.100.7", &body);
            tokio::spawn(async move { sender.send_request(request).await })
        })
        .collect();
    // Both are with the replica (its 800 ms delay) before the third arrives.
    while replica.state.in_flight.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut third = sender.clone();
    let refused = third
        .send_request(completion(running.addr, "10.1.1.1, 198.51.100.7", &body))
        .await
        .expect("answered");
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let text = read(refused).await.body;
    assert!(
        text.contains("Too many requests in flight from your address"),
        "{text}"
    );
    // Another forwarded client on the same proxy connection is served.
    let mut other = sender.clone();
    let served = other
        .send_request(completion(running.addr, "198.51.100.8", &body))
        .await
        .expect("answered");
    assert_eq!(served.status(), 200);
    for request in held {
        let response = request.await.expect("joins").expect("answered");
        assert_eq!(response.status(), 200);
    }
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_its_client_stops_reading_is_cut_and_its_slot_freed() {
    let replica = MockReplica::start().await;
    // A 20 s stream: what ends it sooner is the gateway cutting it.
    replica.state.tokens.store(20_000, Ordering::SeqCst);
    replica.state.token_delay_ms.store(1, Ordering::SeqCst);
    let extra = "stream_write_timeout_ms: 500\n";
    let (running, client) = gateway(&config(&[&replica], "{}", extra)).await;
    wait_ready(&running, "m", 1).await;
    let (mut sender, connection) = h2(running.addr, 65_535).await;
    let mut body = completion_body("x", 50_000);
    body["stream"] = true.into();
    let mut response = sender
        .send_request(completion(running.addr, "198.51.100.7", &body))
        .await
        .expect("answered");
    assert_eq!(response.status(), 200);
    let first = response.frame().await.expect("a frame").expect("ok");
    assert!(first.is_data());
    // Read no more, and keep the stream open: its window runs out, the socket does not fill.
    let stopped = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), connection).await;
    assert!(
        ended.is_ok(),
        "the stalled stream's connection was still open after 10 s"
    );
    let cut_after = stopped.elapsed();
    assert!(
        cut_after >= Duration::from_millis(500),
        "cut after {cut_after:?}"
    );
    let in_flight = "tokenscale_gateway_pod_in_flight_requests";
    let mut freed = series(&client, in_flight).await;
    for _ in 0..50 {
        if freed == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        freed = series(&client, in_flight).await;
    }
    assert_eq!(freed, "0", "the stream's in-flight slot is freed");
    drop(response);
    running.shutdown().await.expect("clean shutdown");
}
