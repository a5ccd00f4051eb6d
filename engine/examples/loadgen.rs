//! Benchmark: starts `tokenscale-engine`'s server in-process on the given model (or targets a
//! running server with `--addr`) and sweeps concurrency, printing output tokens/s, requests/s,
//! p50/p95 TTFT and p50/p95 time per output token.
//!
//! `cargo run --release -p tokenscale-engine --example loadgen -- --model smollm2-135m
//!  [--concurrency 1,4,16,32,64] [--prompt-tokens 128] [--output-tokens 128] [--waves 2]`

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokenscale_engine::server::loadgen::{self, LoadSpec};
use tokenscale_engine::server::{self, ServeConfig};

#[derive(Debug, Parser)]
struct Args {
    /// Model alias or .gguf path for the in-process server.
    #[arg(long, default_value = "smollm2-135m")]
    model: String,
    /// Target an already running server instead (host:port).
    #[arg(long)]
    addr: Option<std::net::SocketAddr>,
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,32,64")]
    concurrency: Vec<usize>,
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    #[arg(long, default_value_t = 128)]
    output_tokens: usize,
    /// Requests per level = waves × concurrency (at least 4).
    #[arg(long, default_value_t = 2)]
    waves: usize,
    #[arg(long, default_value_t = 32_768)]
    kv_cache_tokens: usize,
    #[arg(long, default_value_t = ServeConfig::default().max_batch_tokens)]
    max_batch_tokens: usize,
    /// Print one JSON object per level too.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (addr, model, stop) = match args.addr {
            Some(addr) => (addr, String::new(), None),
            None => {
                let config = ServeConfig {
                    model: args.model.clone(),
                    kv_cache_tokens: args.kv_cache_tokens,
                    max_batch_tokens: args.max_batch_tokens,
                    served_model_name: Some("bench".into()),
                    ..ServeConfig::default()
                };
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let addr = listener.local_addr()?;
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                let loader_config = config.clone();
                let task = tokio::spawn(server::serve_on(listener, config, move || server::load_model(&loader_config), async {
                    let _ = rx.await;
                }));
                wait_ready(addr).await.context("the server did not become ready")?;
                (addr, "bench".to_string(), Some((tx, task)))
            }
        };
        println!("| concurrency | requests | output tok/s | req/s | TTFT p50 s | TTFT p95 s | TPOT p50 ms | TPOT p95 ms |");
        println!("|---|---|---|---|---|---|---|---|");
        for &concurrency in &args.concurrency {
            let spec = LoadSpec {
                addr,
                model: model.clone(),
                concurrency,
                num_requests: (concurrency * args.waves).max(4),
                prompt_tokens: args.prompt_tokens,
                output_tokens: args.output_tokens,
            };
            let r = loadgen::run(&spec).await;
            println!(
                "| {} | {}{} | {:.1} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} |",
                r.concurrency,
                r.requests,
                if r.failed > 0 { format!(" ({} failed)", r.failed) } else { String::new() },
                r.output_tokens_per_s,
                r.requests_per_s,
                r.ttft_p50_s,
                r.ttft_p95_s,
                r.tpot_p50_s * 1e3,
                r.tpot_p95_s * 1e3
            );
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            }
        }
        if let Some((tx, task)) = stop {
            let _ = tx.send(());
            let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
        }
        anyhow::Ok(())
    })
}

async fn wait_ready(addr: std::net::SocketAddr) -> anyhow::Result<()> {
    for _ in 0..600 {
        if let Ok(stream) = tokio::net::TcpStream::connect(addr).await {
            drop(stream);
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Empty<bytes::Bytes>>();
            let uri: hyper::Uri = format!("http://{addr}/health").parse()?;
            if client.get(uri).await.is_ok_and(|r| r.status() == 200) {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("not ready after 60 s")
}
