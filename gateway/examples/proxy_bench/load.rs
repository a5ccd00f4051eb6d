//! Load generators: closed-loop saturation and many open streams (paced load: [`crate::paced`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The request every load generator sends (all gateway layers see a real body).
pub const BODY: &str = r#"{"model":"bench","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say ok four times."}],"max_tokens":16}"#;

/// One keep-alive HTTP/1.1 connection that sends `BODY` and reads the reply.
struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    target: SocketAddr,
}

impl Conn {
    async fn open(target: SocketAddr) -> std::io::Result<Self> {
        let stream = tokio::net::TcpStream::connect(target).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(connection);
        Ok(Self { sender, target })
    }

    /// One request; `Ok(true)` for a 200.
    async fn call(&mut self) -> std::io::Result<bool> {
        let request = Request::post("/v1/chat/completions")
            .header("host", self.target.to_string())
            .header("content-type", "application/json")
            .header("authorization", "Bearer bench-key")
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .map_err(std::io::Error::other)?;
        self.sender.ready().await.map_err(std::io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(std::io::Error::other)?;
        let ok = response.status() == 200;
        response
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?;
        Ok(ok)
    }
}

/// Closed loop: `connections` clients send back to back for `duration`; returns requests/s
/// and the requests completed.
pub async fn saturate(
    target: SocketAddr,
    connections: usize,
    duration: Duration,
) -> std::io::Result<(f64, u64)> {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let mut conn = Conn::open(target).await?;
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                match conn.call().await {
                    Ok(ok) => done += ok as u64,
                    // The server closed the keep-alive connection: reconnect.
                    Err(_) => conn = Conn::open(target).await?,
                }
            }
            Ok::<_, std::io::Error>(done)
        }));
    }
    let started = Instant::now();
    let mut total = 0;
    for task in tasks {
        total += task.await.map_err(std::io::Error::other)??;
    }
    Ok((total as f64 / started.elapsed().as_secs_f64(), total))
}

/// Opens `count` streaming requests and keeps them open (reads only the headers and first
/// chunk); returns the sockets.
pub async fn open_streams(
    target: SocketAddr,
    model: &str,
    count: usize,
) -> std::io::Result<Vec<tokio::net::TcpStream>> {
    let body = BODY
        .replace("\"max_tokens\":16", "\"max_tokens\":16,\"stream\":true")
        .replace("\"model\":\"bench\"", &format!("\"model\":\"{model}\""));
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {target}\r\ncontent-type: application/json\r\nauthorization: Bearer bench-key\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut streams = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let mut opening = Vec::new();
        for _ in chunk {
            let request = request.clone();
            opening.push(tokio::spawn(async move {
                let mut stream = tokio::net::TcpStream::connect(target).await?;
                stream.write_all(request.as_bytes()).await?;
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                // Headers plus the first SSE event.
                while !seen.windows(4).any(|w| w == b"ok\"}") {
                    let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
                        .await
                        .map_err(std::io::Error::other)??;
                    if n == 0 {
                        return Err(std::io::Error::other(format!(
                            "closed early: {}",
                            String::from_utf8_lossy(&seen)
                        )));
                    }
                    seen.extend_from_slice(&buf[..n]);
                }
                Ok::<_, std::io::Error>(stream)
            }));
        }
        for task in opening {
            streams.push(task.await.map_err(std::io::Error::other)??);
        }
    }
    Ok(streams)
}
