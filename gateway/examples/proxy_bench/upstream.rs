//! The instant upstream: answers completions at once (or holds SSE streams open).

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};

const COMPLETION: &str = r#"{"id":"cmpl-bench","object":"chat.completion","created":0,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"ok ok ok ok"},"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16,"prompt_tokens_details":{"cached_tokens":0}}}"#;

type UpBody = BoxBody<Bytes, Infallible>;

async fn respond(request: Request<Incoming>) -> Result<Response<UpBody>, Infallible> {
    let path = request.uri().path().to_string();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let full = |text: &'static str| Full::new(Bytes::from_static(text.as_bytes())).boxed();
    Ok(match path.as_str() {
        "/health" => Response::new(full("ok")),
        "/metrics" => Response::new(full(
            "vllm:num_requests_waiting{model_name=\"bench\"} 0\nvllm:kv_cache_usage_perc{model_name=\"bench\"} 0\n",
        )),
        _ if body.windows(13).any(|w| w == b"\"stream\":true") => {
            // One chunk now, then hold the stream open (the memory test's streams).
            let stream = futures::stream::unfold(0u32, |n| async move {
                if n > 0 {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                let chunk = Bytes::from_static(
                    b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n",
                );
                Some((Ok::<_, Infallible>(Frame::data(chunk)), n + 1))
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(StreamBody::new(stream).boxed())
                .unwrap_or_default()
        }
        _ => Response::builder()
            .header("content-type", "application/json")
            .body(full(COMPLETION))
            .unwrap_or_default(),
    })
}

/// Serves on `port` until the process is killed: `threads` threads, each with its own
/// single-threaded runtime and its own `SO_REUSEPORT` listener (the kernel spreads the
/// connections). It shares two cores with the load generator and the proxy under test, so
/// it should cost them as little as possible: a multi-threaded runtime spent ~40 µs of CPU
/// per paced request here, waking its other worker for each one.
pub fn run(port: u16, threads: usize) -> std::io::Result<()> {
    let serving: Vec<_> = (0..threads.max(1))
        .map(|_| std::thread::spawn(move || serve(port)))
        .collect();
    for thread in serving {
        thread
            .join()
            .map_err(|_| std::io::Error::other("upstream thread panicked"))??;
    }
    Ok(())
}

fn serve(port: u16) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.bind(([127, 0, 0, 1], port).into())?;
        let listener = socket.listen(1024)?;
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                // The memory test multiplexes 10,000 streams over one h2c connection.
                builder.http2().max_concurrent_streams(20_000);
                let _ = builder
                    .serve_connection(TokioIo::new(stream), hyper::service::service_fn(respond))
                    .await;
            });
        }
    })
}
