//! `tokenscale bench`: load any OpenAI-compatible server at several concurrencies (closed
//! loop) or request rates (open loop, Poisson), stream every response, and report
//! throughput and TTFT / TPOT / end-to-end percentiles per point, the operating point under
//! an SLO, a JSON report and a plot.

mod args;
pub mod calibrate;
mod client;
mod load;
pub(crate) mod plot;
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
    /// The measurements could not be fitted.
    #[error("calibration failed: {0}")]
    Calibrate(#[from] calibrate::FitError),
}

/// Runs the bench and returns the table to print (the JSON and plot go to their files).
pub fn run_command(args: &BenchArgs) -> Result<String, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    let (report, calibration) = runtime.block_on(async {
        let report = match &args.calibrate {
            // Decode points with short prompts: the slope over concurrency is then decode
            // work, not other requests' prefills landing in the same steps.
            Some(_) => {
                run(&BenchArgs {
                    input_tokens: CALIBRATION_PROMPT_TOKENS,
                    ..args.clone()
                })
                .await?
            }
            None => run(args).await?,
        };
        let calibration = match &args.calibrate {
            Some(path) => Some(calibrate_and_write(args, &report, path).await?),
            None => None,
        };
        Ok::<_, BenchError>((report, calibration))
    })?;
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
    let mut table = report::table(&report);
    if let Some(text) = calibration {
        table.push('\n');
        table.push_str(&text);
    }
    Ok(table)
}

/// Prompt length of `--calibrate`'s concurrency sweep.
const CALIBRATION_PROMPT_TOKENS: u64 = 16;

/// `--calibrate`: measures the long-prompt point, fits, writes the profile; returns the fit
/// table and where the profile went.
async fn calibrate_and_write(
    args: &BenchArgs,
    report: &Report,
    path: &std::path::Path,
) -> Result<String, BenchError> {
    let measured = |p: &Point, asked_input: u64| calibrate::Measured {
        concurrency: p.concurrency.unwrap_or(1),
        // The server's own prompt count where it gave one: the prompt is built from words.
        input_tokens: if p.mean_input_tokens > 0.0 {
            p.mean_input_tokens
        } else {
            asked_input as f64
        },
        output_tokens: p.output_tokens as f64 / p.requests_ok.max(1) as f64,
        ttft_p50_s: p.ttft_s.map_or(f64::NAN, |q| q.p50),
        tpot_p50_s: p.tpot_s.map_or(f64::NAN, |q| q.p50),
    };
    let loaded: Vec<calibrate::Measured> = report
        .points
        .iter()
        .map(|p| measured(p, CALIBRATION_PROMPT_TOKENS))
        .collect();
    let long_input = 4 * args.input_tokens.max(CALIBRATION_PROMPT_TOKENS);
    let long_args = BenchArgs {
        concurrency: vec![1],
        input_tokens: long_input,
        requests: Some(args.requests.unwrap_or(8).clamp(4, 16)),
        duration: None,
        calibrate: None,
        out: None,
        plot: None,
        ..args.clone()
    };
    let long_report = run(&long_args).await?;
    let long = long_report
        .points
        .first()
        .map(|p| measured(p, long_input))
        .ok_or(calibrate::FitError::TooFewPoints)?;
    let fit = calibrate::fit(&loaded, &long)?;
    let name = path
        .file_stem()
        .map_or_else(|| "calibrated".into(), |s| s.to_string_lossy().into_owned());
    let server = &report.server;
    let on_cpu = server.backend.as_deref() == Some("cpu");
    let facts = calibrate::ProfileFacts {
        name,
        description: format!(
            "{} served at {} ({} backend{})",
            report.model,
            report.url,
            server.backend.as_deref().unwrap_or("unknown"),
            if server.simulated == Some(true) {
                ", simulated"
            } else {
                ""
            }
        ),
        source: format!(
            "tokenscale bench --calibrate: closed loop at concurrency {:?}, {} prompt / {} output tokens, plus {} prompt tokens at concurrency 1; client {} ({} cores)",
            loaded.iter().map(|m| m.concurrency).collect::<Vec<_>>(),
            CALIBRATION_PROMPT_TOKENS,
            args.output_tokens,
            long_input,
            report.client_hardware.cpu_model,
            report.client_hardware.cpu_cores
        ),
        gpus_per_replica: if on_cpu { 0 } else { args.gpus },
        kv: tokenscale_common::perf_model::KvBudget {
            block_tokens: server.block_size.map_or(16, |b| b as u32),
            // A server that does not say: room for a full batch of the measured requests.
            blocks: server.kv_blocks.map_or_else(
                || {
                    let per_seq = (long_input + args.output_tokens).div_ceil(16);
                    (u64::from(args.max_num_seqs) * per_seq) as u32
                },
                |b| b as u32,
            ),
        },
        max_num_seqs: args.max_num_seqs,
        max_batch_tokens: args.max_batch_tokens,
        cold_start_s: args.cold_start,
    };
    let profile = calibrate::profile(&fit, &facts);
    let yaml = calibrate::to_yaml(&profile, &fit);
    std::fs::write(path, &yaml).map_err(|source| BenchError::Write {
        path: path.display().to_string(),
        source,
    })?;
    Ok(format!(
        "{}profile written to {}\n",
        calibrate::table(&fit),
        path.display()
    ))
}

/// Measures every load point of `args` and builds the report.
pub async fn run(args: &BenchArgs) -> Result<Report, BenchError> {
    let levels = args.levels()?;
    let stop = args.stop();
    let base_url = args.url.trim_end_matches('/').to_string();
    let client = http_client();
    let metrics_url = args
        .metrics_url
        .clone()
        .unwrap_or_else(|| format!("{base_url}/metrics"));
    let mut server = server_info::read(&client, &base_url, &metrics_url).await;
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
    let tokens_before = metrics_tokens(&client, &metrics_url).await;
    let shape = Arc::new(RequestShape {
        base_url: base_url.clone(),
        model: args.model.clone(),
        prompt: prompt_of(args.input_tokens),
        run_tag: run_tag(),
        max_tokens: args.output_tokens,
        timeout: Duration::from_secs_f64(args.timeout_s),
    });
    let mut points = Vec::new();
    for (index, level) in levels.into_iter().enumerate() {
        let bar = progress_bar(stop, &level.label());
        // Request numbers restart at every level: the level goes into the tag.
        let shape = Arc::new(RequestShape {
            run_tag: format!("{}-{index}-", shape.run_tag),
            ..(*shape).clone()
        });
        let ctx = Ctx {
            client: client.clone(),
            shape,
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
    let tokens_after = metrics_tokens(&client, &metrics_url).await;
    server.generation_tokens_delta = tokens_before.zip(tokens_after).map(|(b, a)| a - b);
    let slo = args.slo();
    let operating_point = slo
        .as_ref()
        .and_then(|s| report::OperatingPoint::of(&points, s));
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

async fn metrics_tokens(client: &client::HttpClient, metrics_url: &str) -> Option<f64> {
    server_info::generation_tokens(&server_info::get_text(client, metrics_url, "").await?)
}

/// A short tag unique to this run (clock and process), e.g. `r3f9a2c`.
fn run_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("r{:x}", (nanos ^ u64::from(std::process::id())) & 0xff_ffff)
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
