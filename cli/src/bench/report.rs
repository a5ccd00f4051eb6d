//! The bench report: per load point throughput, latency percentiles and errors; the
//! operating point under an SLO; the table printed at the end. Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::stats::{Percentiles, Sample};

/// Everything a reader needs to reproduce and compare a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub url: String,
    pub model: String,
    /// What the server said about itself (`/v1/models`, `/metrics`).
    pub server: ServerInfo,
    /// The machine the bench ran on.
    pub client_hardware: Hardware,
    /// Asked prompt length (tokens, approximate: the prompt is built from words).
    pub input_tokens: u64,
    /// Asked output length (tokens; EOS ignored).
    pub output_tokens: u64,
    /// GPUs behind the URL, for tokens/s per GPU.
    pub gpus: u32,
    /// Seed of the Poisson arrivals.
    pub seed: u64,
    /// The SLO the operating point meets, if one was given.
    pub slo: Option<Slo>,
    pub points: Vec<Point>,
    /// The operating point: the highest throughput meeting the SLO (`null` when no point
    /// does, or no SLO was given).
    pub operating_point: Option<OperatingPoint>,
}

/// The point of highest output tokens/s whose p95 TTFT and TPOT are both within the SLO.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OperatingPoint {
    /// Index into the report's `points`.
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    pub output_tokens_per_s: f64,
    pub ttft_p95_s: Option<f64>,
    pub tpot_p95_s: Option<f64>,
}

impl OperatingPoint {
    /// The operating point of `points` under `slo`, if any point meets it.
    pub fn of(points: &[Point], slo: &Slo) -> Option<Self> {
        let index = operating_point(points, slo)?;
        let p = points.get(index)?;
        Some(Self {
            index,
            concurrency: p.concurrency,
            rate: p.rate,
            output_tokens_per_s: p.output_tokens_per_s,
            ttft_p95_s: p.ttft_s.map(|q| q.p95),
            tpot_p95_s: p.tpot_s.map(|q| q.p95),
        })
    }
}

/// Facts read from the server; `None` where it did not say.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Model ids from `/v1/models`.
    pub models: Vec<String>,
    pub max_model_len: Option<u64>,
    /// `tokenscale_engine_backend_info{backend}`.
    pub backend: Option<String>,
    /// `tokenscale_engine_backend_info{simulated}`: true for the `sim` backend.
    pub simulated: Option<bool>,
    /// `vllm:cache_config_info{block_size}`.
    pub block_size: Option<u64>,
    /// `vllm:cache_config_info{num_gpu_blocks}`.
    pub kv_blocks: Option<u64>,
    /// Change of `vllm:generation_tokens_total` (an engine) or
    /// `tokenscale_gateway_generation_tokens_total` (a gateway) over the whole run: the
    /// server's own count.
    pub generation_tokens_delta: Option<f64>,
    /// Where that count was read (`--metrics-url`).
    #[serde(default)]
    pub metrics_url: String,
}

/// The client machine.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Hardware {
    pub cpu_model: String,
    pub cpu_cores: usize,
}

/// p95 targets, in seconds; a target not given is infinite (JSON `null`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub ttft_p95_s: f64,
    pub tpot_p95_s: f64,
}

/// One load level and what it measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Closed loop: clients sending back to back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Open loop: Poisson arrivals per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    pub duration_s: f64,
    pub requests_ok: u64,
    pub requests_failed: u64,
    pub output_tokens: u64,
    pub mean_input_tokens: f64,
    pub output_tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub requests_per_s: f64,
    pub ttft_s: Option<Percentiles>,
    pub tpot_s: Option<Percentiles>,
    pub e2e_s: Option<Percentiles>,
    /// Failed requests by kind (`connect`, `status_503`, `stream`, `timeout`, ...).
    pub errors: BTreeMap<String, u64>,
}

/// What a load level's driver collected.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub samples: Vec<Sample>,
    pub errors: BTreeMap<String, u64>,
    /// From the first send to the last response, in seconds.
    pub elapsed_s: f64,
}

impl Point {
    /// Summarises `outcome` for a level given by `concurrency` or `rate`.
    pub fn summarise(
        concurrency: Option<u32>,
        rate: Option<f64>,
        outcome: &Outcome,
        gpus: u32,
    ) -> Self {
        let samples = &outcome.samples;
        let elapsed_s = outcome.elapsed_s.max(1e-9);
        let output_tokens: u64 = samples.iter().map(|s| s.output_tokens).sum();
        let input_tokens: u64 = samples.iter().map(|s| s.input_tokens).sum();
        let collect =
            |f: &dyn Fn(&Sample) -> Option<f64>| samples.iter().filter_map(f).collect::<Vec<_>>();
        let output_tokens_per_s = output_tokens as f64 / elapsed_s;
        Self {
            concurrency,
            rate,
            duration_s: outcome.elapsed_s,
            requests_ok: samples.len() as u64,
            requests_failed: outcome.errors.values().sum(),
            output_tokens,
            mean_input_tokens: if samples.is_empty() {
                0.0
            } else {
                input_tokens as f64 / samples.len() as f64
            },
            output_tokens_per_s,
            tokens_per_s_per_gpu: output_tokens_per_s / f64::from(gpus.max(1)),
            requests_per_s: samples.len() as f64 / elapsed_s,
            ttft_s: Percentiles::of(&collect(&|s| Some(s.ttft_s))),
            tpot_s: Percentiles::of(&collect(&|s| s.tpot_s())),
            e2e_s: Percentiles::of(&collect(&|s| Some(s.e2e_s))),
            errors: outcome.errors.clone(),
        }
    }

    /// Whether both p95s are within `slo` (a point with no successful request never is).
    pub fn meets(&self, slo: &Slo) -> bool {
        let ttft_ok = self.ttft_s.is_some_and(|p| p.p95 <= slo.ttft_p95_s);
        // One-token outputs have no TPOT: then only TTFT counts.
        let tpot_ok = self.tpot_s.is_none_or(|p| p.p95 <= slo.tpot_p95_s);
        self.requests_ok > 0 && ttft_ok && tpot_ok
    }

    /// How much load the level offered (concurrency or rate): between points of equal
    /// throughput the lighter load wins, as it gives the same tokens at lower latency.
    fn load(&self) -> f64 {
        match (self.concurrency, self.rate) {
            (Some(c), _) => f64::from(c),
            (_, Some(r)) => r,
            _ => f64::INFINITY,
        }
    }

    /// `c=16` or `r=2.5/s`.
    pub fn level(&self) -> String {
        match (self.concurrency, self.rate) {
            (Some(c), _) => format!("c={c}"),
            (_, Some(r)) => format!("r={r}/s"),
            _ => "-".into(),
        }
    }
}

/// Index of the point of highest output tokens/s that meets `slo`, if any; ties go to the
/// lighter load, then to the point given first.
pub fn operating_point(points: &[Point], slo: &Slo) -> Option<usize> {
    points
        .iter()
        .enumerate()
        .filter(|(_, p)| p.meets(slo))
        .max_by(|(i, a), (j, b)| {
            a.output_tokens_per_s
                .total_cmp(&b.output_tokens_per_s)
                .then_with(|| b.load().total_cmp(&a.load()))
                .then_with(|| j.cmp(i))
        })
        .map(|(i, _)| i)
}

/// A target in ms for the table (`any` when it was not given).
fn target_ms(seconds: f64) -> String {
    if seconds.is_finite() {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        "any".into()
    }
}

/// The SLO line above the table.
fn slo_line(slo: Option<&Slo>) -> String {
    match slo {
        Some(s) => format!(
            "SLO: TTFT p95 <= {}, TPOT p95 <= {}",
            target_ms(s.ttft_p95_s),
            target_ms(s.tpot_p95_s)
        ),
        None => "SLO: none (--slo-ttft and --slo-tpot mark the operating point)".into(),
    }
}

/// The one-line conclusion under the table; `None` without an SLO.
pub fn conclusion(report: &Report) -> Option<String> {
    let slo = report.slo.as_ref()?;
    let targets = format!(
        "SLO {} / {}",
        target_ms(slo.ttft_p95_s),
        target_ms(slo.tpot_p95_s)
    );
    let ms = |v: Option<f64>| v.map_or("-".into(), |s| format!("{:.1} ms", s * 1e3));
    Some(match &report.operating_point {
        Some(op) => {
            let level = match (op.concurrency, op.rate) {
                (Some(c), _) => format!("concurrency {c}"),
                (_, Some(r)) => format!("rate {r}/s"),
                _ => "-".into(),
            };
            format!(
                "operating point: {level}, {:.1} tokens/s, TTFT p95 {}, TPOT p95 {} ({targets})",
                op.output_tokens_per_s,
                ms(op.ttft_p95_s),
                ms(op.tpot_p95_s)
            )
        }
        None => format!("operating point: none, no level meets the SLO ({targets})"),
    })
}

/// The table printed after a run.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", slo_line(report.slo.as_ref()));
    let ms = |p: Option<Percentiles>, f: fn(&Percentiles) -> f64| {
        p.map_or("-".to_string(), |p| format!("{:.1}", f(&p) * 1e3))
    };
    let _ = writeln!(
        out,
        "{:<10} {:>8} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "level",
        "req/s",
        "out tok/s",
        "ttft p50",
        "ttft p95",
        "tpot p50",
        "tpot p95",
        "e2e p95",
        "e2e p99",
        "errors"
    );
    for (i, p) in report.points.iter().enumerate() {
        let mark = if report.operating_point.is_some_and(|op| op.index == i) {
            " <- operating point"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<10} {:>8.2} {:>11.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}{mark}",
            p.level(),
            p.requests_per_s,
            p.output_tokens_per_s,
            ms(p.ttft_s, |p| p.p50),
            ms(p.ttft_s, |p| p.p95),
            ms(p.tpot_s, |p| p.p50),
            ms(p.tpot_s, |p| p.p95),
            ms(p.e2e_s, |p| p.p95),
            ms(p.e2e_s, |p| p.p99),
            p.requests_failed,
        );
    }
    let _ = writeln!(out, "(latencies in ms)");
    if let Some(line) = conclusion(report) {
        let _ = writeln!(out, "{line}");
    }
    let server = &report.server;
    let _ = match server.generation_tokens_delta {
        Some(tokens) => writeln!(
            out,
            "the server counted {tokens} generated tokens ({})",
            server.metrics_url
        ),
        None => writeln!(
            out,
            "the server's generated-token count is unavailable: no counter at {} (--metrics-url names where it is)",
            server.metrics_url
        ),
    };
    out
}

#[cfg(test)]
pub(super) mod tests;
