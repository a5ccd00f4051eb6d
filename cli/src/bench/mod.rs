//! `tokenscale bench`: load any OpenAI-compatible server at several concurrencies (closed
//! loop) or request rates (open loop, Poisson), stream every response, and report
//! throughput and TTFT / TPOT / end-to-end percentiles per point, the operating point under
//! an SLO, a JSON report and a plot.

mod args;
mod client;
mod load;
mod plot;
pub mod report;
mod server_info;
pub mod stats;

use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub use args::{BenchArgs, parse_duration_s};
use client::{RequestShape, http_client};
use load::{Ctx, Stop};
use report::{Point, Report, Slo};

/// Why a bench could not run or be written.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The flags make no sense together.
    #[error("invalid arguments: {0}")]
    Args(String),
    /// The server did not answer at all.
    #[error("no answer from {url}: {message}")]
    Unreachable { url: String, message: String },
    /// The report could not be written.
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The plot could not be drawn.
    #[error("plotting {path}: {message}")]
    Plot { path: String, message: String },
    /// The async runtime did not start.
    #[error("starting the runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Runs the bench and returns the table to print (the JSON and plot go to their files).
pub fn run_command(args: &BenchArgs) -> Result<String, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    let report = runtime.block_on(run(args))?;
    if let Some(path) = &args.out {
        let json = serde_json::to_string_pretty(&report).unwrap_or_default();
        std::fs::write(path, json).map_err(|source| BenchError::Write {
            path: path.display().to_string(),
            source,
        })?;
    }
    if let Some(path) = &args.plot {
        plot::write(path, &report)?;
    }
    Ok(report::table(&report))
}

/// Measures every load point of `args` and builds the report.
pub async fn run(args: &BenchArgs) -> Result<Report, BenchError> {
    let levels = args.levels()?;
    let stop = args.stop();
    let base_url = args.url.trim_end_matches('/').to_string();
    let client = http_client();
    let mut server = server_info::read(&client, &base_url).await;
    if server.models.is_empty()
        && server_info::get_text(&client, &base_url, "/health")
            .await
            .is_none()
    {
        // Not fatal for servers without /v1/models, but a dead URL is worth a clear error.
        let probe = server_info::get_text(&client, &base_url, "/v1/models").await;
        if probe.is_none() && !reachable(&base_url).await {
            return Err(BenchError::Unreachable {
                url: base_url,
                message: "connection refused or timed out".into(),
            });
        }
    }
    let tokens_before = metrics_tokens(&client, &base_url).await;
    let shape = Arc::new(RequestShape {
        base_url: base_url.clone(),
        model: args.model.clone(),
        prompt: prompt_of(args.input_tokens),
        max_tokens: args.output_tokens,
        timeout: Duration::from_secs_f64(args.timeout_s),
    });
    let mut points = Vec::new();
    for level in levels {
        let bar = progress_bar(stop, &level.label());
        let ctx = Ctx {
            client: client.clone(),
            shape: shape.clone(),
            bar: bar.clone(),
        };
        let outcome = match level {
            Level::Concurrency(c) => load::closed_loop(&ctx, c, stop).await,
            Level::Rate(r) => load::open_loop(&ctx, r, stop, args.seed).await,
        };
        bar.finish_and_clear();
        let (c, r) = match level {
            Level::Concurrency(c) => (Some(c), None),
            Level::Rate(r) => (None, Some(r)),
        };
        points.push(Point::summarise(c, r, &outcome, args.gpus));
    }
    let tokens_after = metrics_tokens(&client, &base_url).await;
    server.generation_tokens_delta = tokens_before.zip(tokens_after).map(|(b, a)| a - b);
    let slo = args.slo();
    let operating_point = slo
        .as_ref()
        .and_then(|s| report::operating_point(&points, s));
    Ok(Report {
        url: base_url,
        model: args.model.clone(),
        server,
        client_hardware: server_info::hardware(),
        input_tokens: args.input_tokens,
        output_tokens: args.output_tokens,
        gpus: args.gpus,
        seed: args.seed,
        slo,
        points,
        operating_point,
    })
}

/// One load level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Level {
    Concurrency(u32),
    Rate(f64),
}

impl Level {
    fn label(&self) -> String {
        match self {
            Self::Concurrency(c) => format!("concurrency {c}"),
            Self::Rate(r) => format!("rate {r}/s"),
        }
    }
}

async fn reachable(base_url: &str) -> bool {
    let authority = base_url
        .split("://")
        .nth(1)
        .unwrap_or(base_url)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(authority),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}

async fn metrics_tokens(client: &client::HttpClient, base_url: &str) -> Option<f64> {
    server_info::generation_tokens(&server_info::get_text(client, base_url, "/metrics").await?)
}

/// A prompt of about `tokens` tokens: common short words, each about one token in the
/// BPE vocabularies of current models.
pub fn prompt_of(tokens: u64) -> String {
    const WORDS: [&str; 16] = [
        "the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "saw", "one", "dog", "run",
        "by", "big", "tree",
    ];
    let words: Vec<&str> = (0..tokens.max(1) as usize)
        .map(|i| WORDS[i % WORDS.len()])
        .collect();
    words.join(" ")
}

fn progress_bar(stop: Stop, label: &str) -> ProgressBar {
    let bar = match stop {
        Stop::Requests(n) => ProgressBar::new(n),
        Stop::Duration(_) => ProgressBar::new_spinner(),
    };
    let template = match stop {
        Stop::Requests(_) => "{msg:>16} [{bar:30}] {pos}/{len} requests ({per_sec})",
        Stop::Duration(_) => "{msg:>16} {spinner} {pos} requests ({per_sec}, {elapsed})",
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The SLO of the flags, if both were given.
fn slo_of(ttft: Option<f64>, tpot: Option<f64>) -> Option<Slo> {
    match (ttft, tpot) {
        (None, None) => None,
        (t, p) => Some(Slo {
            ttft_p95_s: t.unwrap_or(f64::INFINITY),
            tpot_p95_s: p.unwrap_or(f64::INFINITY),
        }),
    }
}
