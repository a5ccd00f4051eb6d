//! The flags of `tokenscale bench` and their checks.

use std::path::PathBuf;
use std::time::Duration;

use super::load::Stop;
use super::report::Slo;
use super::{BenchError, Level, slo_of};

/// Arguments of `tokenscale bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Base URL of the server (`http://127.0.0.1:8000`).
    #[arg(long)]
    pub url: String,
    /// Where the server's Prometheus text is (default: `URL/metrics`). A tokenscale gateway
    /// serves it on its admin listener (`--admin-listen`), not on the API port; without it
    /// the report says the server's own token count is unavailable.
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Model name to request.
    #[arg(long)]
    pub model: String,
    /// Closed loop: clients sending back to back, one point per value (`1,4,16,64`).
    #[arg(long, value_delimiter = ',', conflicts_with = "rate")]
    pub concurrency: Vec<u32>,
    /// Open loop: Poisson arrivals per second, one point per value (`2,5.5`).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Prompt length, in tokens (approximate: built from short words).
    #[arg(long, default_value_t = 128)]
    pub input_tokens: u64,
    /// Output length, in tokens (`max_tokens` with `ignore_eos`).
    #[arg(long, default_value_t = 128)]
    pub output_tokens: u64,
    /// Seconds per point (instead of `--requests`).
    #[arg(long, value_parser = parse_duration_s, conflicts_with = "requests")]
    pub duration: Option<f64>,
    /// Requests per point (default 100 when `--duration` is not given).
    #[arg(long)]
    pub requests: Option<u64>,
    /// GPUs behind the URL, for tokens/s per GPU.
    #[arg(long, default_value_t = 1)]
    pub gpus: u32,
    /// Seed of the Poisson arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// p95 time-to-first-token target (`500ms`, `1s`).
    #[arg(long, value_parser = parse_duration_s)]
    pub slo_ttft: Option<f64>,
    /// p95 time-per-output-token target (`50ms`).
    #[arg(long, value_parser = parse_duration_s)]
    pub slo_tpot: Option<f64>,
    /// Write the JSON report here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Draw throughput against p95 latency here (an `.svg` file).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Limit on one request (`300s`).
    #[arg(long = "timeout", value_parser = parse_duration_s, default_value = "300s")]
    pub timeout_s: f64,
    /// Fit the performance model to the server and write it here as a profile (YAML) for
    /// `tokenscale sim --profile` and the engine's `--sim-profile`. Runs its own plan: the
    /// concurrency levels (default 1,4,16) with 16-token prompts, then concurrency 1 with
    /// prompts of 4 × `--input-tokens`.
    #[arg(long, conflicts_with = "rate")]
    pub calibrate: Option<PathBuf>,
    /// `--calibrate`: seconds from "replica created" to "ready" (a client cannot see it).
    #[arg(long, value_parser = parse_duration_s, default_value = "60s", requires = "calibrate")]
    pub cold_start: f64,
    /// `--calibrate`: the server's batch limit in sequences (a client cannot read it).
    #[arg(long, default_value_t = 128, requires = "calibrate")]
    pub max_num_seqs: u32,
    /// `--calibrate`: the server's batch limit in tokens per step (a client cannot read it).
    #[arg(long, default_value_t = 512, requires = "calibrate")]
    pub max_batch_tokens: u32,
}

impl BenchArgs {
    /// The load levels, in the order given (and every other flag checked: this runs first).
    pub fn levels(&self) -> Result<Vec<Level>, BenchError> {
        if let Some(path) = &self.plot {
            super::plot::check_svg(path).map_err(BenchError::Args)?;
        }
        if let Some(r) = self.rate.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
            return Err(BenchError::Args(format!(
                "--rate must be > 0 requests/s, got {r}"
            )));
        }
        if self.concurrency.contains(&0) {
            return Err(BenchError::Args("--concurrency must be at least 1".into()));
        }
        if self.output_tokens == 0 {
            return Err(BenchError::Args(
                "--output-tokens must be at least 1".into(),
            ));
        }
        if self.requests == Some(0) {
            return Err(BenchError::Args("--requests must be at least 1".into()));
        }
        let levels: Vec<Level> = if self.rate.is_empty() {
            let mut c = match (self.concurrency.is_empty(), self.calibrate.is_some()) {
                (true, true) => vec![1, 4, 16],
                (true, false) => vec![1],
                (false, _) => self.concurrency.clone(),
            };
            // The fit needs concurrency 1 (its intercept and the long-prompt comparison).
            if self.calibrate.is_some() && !c.contains(&1) {
                c.insert(0, 1);
            }
            if self.calibrate.is_some() && c.len() < 2 {
                return Err(BenchError::Args(
                    "--calibrate needs at least two concurrency levels (e.g. 1,4,16)".into(),
                ));
            }
            c.into_iter().map(Level::Concurrency).collect()
        } else {
            self.rate.iter().copied().map(Level::Rate).collect()
        };
        Ok(levels)
    }

    /// When each point ends.
    pub fn stop(&self) -> Stop {
        match (self.duration, self.requests) {
            (Some(d), _) => Stop::Duration(Duration::from_secs_f64(d)),
            (None, n) => Stop::Requests(n.unwrap_or(100)),
        }
    }

    /// The SLO, if any target was given (a missing one does not constrain).
    pub fn slo(&self) -> Option<Slo> {
        slo_of(self.slo_ttft, self.slo_tpot)
    }
}

/// Parses a flag's duration (`500ms`, `1.5s`, `1m30s`, a bare number of seconds) into
/// seconds, with the one parser flags and manifests share.
pub fn parse_duration_s(text: &str) -> Result<f64, String> {
    tokenscale_common::duration::parse(text).map(|d| d.as_secs_f64())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration_s("500ms"), Ok(0.5));
        assert_eq!(parse_duration_s("2s"), Ok(2.0));
        assert_eq!(parse_duration_s("3"), Ok(3.0));
        assert_eq!(parse_duration_s("1m"), Ok(60.0));
        assert!(
            parse_duration_s("5parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_duration_s("-1s").is_err());
        assert!(parse_duration_s("fast").is_err());
    }

    #[test]
    fn levels_and_stops_follow_the_flags() {
        let cli = Cli::parse_from([
            "b",
            "--url",
            "http://x",
            "--model",
            "m",
            "--concurrency",
            "1,4,16",
            "--requests",
            "8",
        ]);
        let levels = cli.bench.levels().unwrap();
        assert_eq!(
            levels,
            vec![
                Level::Concurrency(1),
                Level::Concurrency(4),
                Level::Concurrency(16)
            ]
        );
        assert_eq!(cli.bench.stop(), Stop::Requests(8));
        let cli = Cli::parse_from([
            "b",
            "--url",
            "u",
            "--model",
            "m",
            "--rate",
            "2.5",
            "--duration",
            "10s",
            "--slo-ttft",
            "500ms",
        ]);
        assert_eq!(cli.bench.levels().unwrap(), vec![Level::Rate(2.5)]);
        assert_eq!(cli.bench.stop(), Stop::Duration(Duration::from_secs(10)));
        assert_eq!(cli.bench.slo().unwrap().ttft_p95_s, 0.5);
        assert!(
            Cli::try_parse_from([
                "b",
                "--url",
                "u",
                "--model",
                "m",
                "--rate",
                "1",
                "--concurrency",
                "2"
            ])
            .is_err()
        );
    }

    #[test]
    fn nonsense_levels_are_typed_errors() {
        let cli = Cli::parse_from(["b", "--url", "u", "--model", "m", "--concurrency", "0"]);
        assert!(
            cli.bench
                .levels()
                .unwrap_err()
                .to_string()
                .contains("--concurrency")
        );
        let cli = Cli::parse_from(["b", "--url", "u", "--model", "m", "--rate", "0"]);
        assert!(
            cli.bench
                .levels()
                .unwrap_err()
                .to_string()
                .contains("--rate")
        );
    }

    #[test]
    fn calibration_levels_always_include_concurrency_one_and_need_two() {
        let parse = |extra: &[&str]| {
            let argv = ["b", "--url", "u", "--model", "m", "--calibrate", "p.yaml"];
            Cli::parse_from(argv.iter().chain(extra)).bench.levels()
        };
        let c = |v: &[u32]| {
            v.iter()
                .copied()
                .map(Level::Concurrency)
                .collect::<Vec<_>>()
        };
        assert_eq!(parse(&[]).unwrap(), c(&[1, 4, 16]));
        assert_eq!(parse(&["--concurrency", "8,32"]).unwrap(), c(&[1, 8, 32]));
        assert!(
            parse(&["--concurrency", "1"])
                .unwrap_err()
                .to_string()
                .contains("two concurrency levels")
        );
        assert!(
            parse(&["--plot", "x.png"])
                .unwrap_err()
                .to_string()
                .contains(".svg")
        );
        let argv = [
            "b",
            "--url",
            "u",
            "--model",
            "m",
            "--calibrate",
            "p",
            "--rate",
            "2",
        ];
        assert!(
            Cli::try_parse_from(argv).is_err(),
            "calibration is closed loop only"
        );
    }
}
