//! `tokenscale sim`: replays a trace against a simulated fleet under several autoscaling
//! policies (the operator's real policy among them) and scores SLO attainment against
//! GPU-hours. A fluid discrete-time model: see `replica` for the approximation.

mod batch;
mod exposition;
mod family;
mod fleet;
mod knee;
mod metrics;
mod plot;
mod policy;
mod replica;
mod report;
mod rng;
mod run;
mod start;
mod targets;
mod trace;

use std::path::PathBuf;

use clap::Args;
use tokenscale_common::perf_model::{PerfModelError, PerfProfile};
use tokenscale_scaling::autoscaler::Slo;

pub use batch::{BatchJob, BatchOutcome};
pub use knee::Knee;
pub use policy::PolicyKind;
pub use run::{PolicyResult, SeriesPoint, SimConfig, simulate};
pub use trace::Trace;

pub use tokenscale_common::perf_model::BUNDLED_PROFILES;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A trace that makes no sense.
    #[error("trace {origin}: {message}")]
    Trace {
        /// File or bundled name.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A bad profile.
    #[error(transparent)]
    Profile(#[from] PerfModelError),
    /// A bad argument.
    #[error("{0}")]
    Usage(String),
    /// The plot could not be written.
    #[error("cannot draw the plot {path}: {message}")]
    Plot {
        /// The output path.
        path: String,
        /// What failed.
        message: String,
    },
}

/// `tokenscale sim` arguments.
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Trace: `diurnal`, `bursty`, `ramp` (bundled), `family:SEED` (a generated member of the
    /// trace family: steps, on/off load, ramps, flash crowds, diurnal curves), a YAML
    /// rate-curve spec, or a `.jsonl` recording (`{"t": s, "input_tokens": n, "output_tokens": m}` a line).
    #[arg(long, default_value = "diurnal")]
    pub trace: String,
    /// Performance profile: `llama3-8b-h100`, `smollm2-cpu`, or a YAML/JSON file.
    #[arg(long, default_value = "llama3-8b-h100")]
    pub profile: String,
    /// Policies to compare, comma-separated: tokenscale, tokenscale-fixed-lead (the same
    /// policy planning with a fixed 60 s lead, the CRD's default `startupTime`, never with the
    /// starts it measures), hpa, static:N, oracle, oracle:PERCENT (the oracle sized for that
    /// percentage of its coming peak: headroom against arrival noise), reactive,
    /// reactive:PERCENT (the oracle without foresight: sized for the rate now, at once: what
    /// reacting with perfect perception reaches at that headroom).
    #[arg(long, default_value = "tokenscale,hpa,oracle")]
    pub policy: String,
    /// Seed of the arrival noise.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulate this long (e.g. `24h`, `90m`, `600s`); a rate curve extends (a diurnal one
    /// repeats), a recording is cut. Default: the trace's own length.
    #[arg(long)]
    pub duration: Option<String>,
    /// Scale a rate-curve trace so its peak is this many requests/s.
    #[arg(long)]
    pub peak_rps: Option<f64>,
    /// p95 time-to-first-token target (e.g. `1s`, `500ms`).
    #[arg(long, default_value = "1s")]
    pub slo_ttft: String,
    /// p95 time-per-output-token target (e.g. `50ms`).
    #[arg(long, default_value = "50ms")]
    pub slo_tpot: String,
    /// Replica bounds.
    #[arg(long, default_value_t = 1)]
    pub min_replicas: u32,
    /// Replica bounds.
    #[arg(long, default_value_t = 2000)]
    pub max_replicas: u32,
    /// Tick of the fluid model, seconds.
    #[arg(long, default_value_t = 0.25)]
    pub tick: f64,
    /// Metrics reach the operator this many seconds late.
    #[arg(long, default_value_t = 5)]
    pub scrape_delay: u64,
    /// Give tokenscale a capacity hint (the CRD's `capacity.tokensPerSecondPerGpu`, from a
    /// bench) of this multiple of the true capacity: 1 is a correct bench, others a wrong
    /// one. Without it, tokenscale learns the capacity from what it measures, as the
    /// operator does for a model nobody benched.
    #[arg(long)]
    pub hint_factor: Option<f64>,
    /// tokenscale's target utilisation of the learned capacity (the CRD's default).
    #[arg(long, default_value_t = 0.8)]
    pub target_utilization: f64,
    /// tokenscale's decision period (the CRD's `scaling.period`; its default).
    #[arg(long, default_value = "15s")]
    pub period: String,
    /// Median replica start time, asked for to ready (e.g. `15s`, `5m`), in place of the
    /// profile's. tokenscale is never told it: it plans with the CRD's default `startupTime`
    /// (60 s) until it has timed its replicas' starts, as the operator does.
    #[arg(long)]
    pub cold_start: Option<String>,
    /// Spread of replica start times: the 95th percentile as a multiple of the median
    /// (log-normal, a heavy right tail: a fresh image pull, a slow download). 1: every start
    /// takes the median.
    #[arg(long, default_value_t = 2.0)]
    pub start_tail: f64,
    /// Time a new replica waits for a free GPU before it starts (a cluster without spare
    /// nodes waits for one to be provisioned), e.g. `5m`. tokenscale is not told it either:
    /// it is part of the start it measures.
    #[arg(long)]
    pub gpu_wait: Option<String>,
    /// tokenscale's foresight, `on` or `off`: learn the model's recurring demand from its own
    /// history (daily curves, on/off cycles, recurring bursts) and pre-warm one lead time
    /// ahead of a rise it predicts. `off` decides on the measured demand alone (to compare).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub foresight: String,
    /// What one prompt token costs a replica, in output tokens, for tokenscale's demand in
    /// both dimensions (the policy's `prompt_token_cost`; 0: prompts are not counted, output
    /// tokens only). Default: the profile's prefill and decode terms at the knee.
    #[arg(long)]
    pub prompt_token_cost: Option<f64>,
    /// A Batch API job, repeatable: `at=2h,tokens=50M,window=24h` (output tokens, with K, M or
    /// G). Served on the capacity interactive traffic leaves; the report says when each
    /// finished, whether by its deadline, and the GPU-hours it added against the same run
    /// without it.
    #[arg(long = "batch", value_name = "SPEC")]
    pub batches: Vec<String>,
    /// One JSON object per policy instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG of demand and replicas over time.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Parses `1.5s`, `500ms`, `90m`, `2h`, `1d`, `1m30s` (a bare number is seconds), with the
/// one duration parser, into seconds.
pub fn parse_duration_s(text: &str) -> Result<f64, SimError> {
    tokenscale_common::duration::parse(text)
        .map(|d| d.as_secs_f64())
        .map_err(|e| SimError::Usage(format!("duration: {e}")))
}

/// Loads a bundled profile by name or a profile file.
pub fn load_profile(name_or_path: &str) -> Result<PerfProfile, SimError> {
    if let Some(text) = tokenscale_common::perf_model::bundled_profile(name_or_path) {
        return Ok(PerfProfile::from_yaml(text)?);
    }
    let text = std::fs::read_to_string(name_or_path).map_err(|source| SimError::Read {
        path: name_or_path.to_string(),
        source,
    })?;
    Ok(PerfProfile::from_yaml(&text)?)
}

/// A comparison ready to run: config, trace, knee and policies.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Fixed settings.
    pub config: SimConfig,
    /// The trace.
    pub trace: Trace,
    /// True capacity of one replica.
    pub knee: Knee,
    /// Policies in order.
    pub policies: Vec<PolicyKind>,
}

impl Comparison {
    /// Member `seed` of the trace family at a median start `cold_start` (e.g. `15s`), under
    /// `policies` (e.g. `tokenscale,oracle`), every other setting the simulator's default: what
    /// the family's test and its diagnostics run.
    pub fn family(seed: u64, cold_start: &str, policies: &str) -> Result<Self, SimError> {
        #[derive(clap::Parser)]
        struct Argv {
            #[command(flatten)]
            sim: SimArgs,
        }
        let trace = format!("family:{seed}");
        let argv = [
            "sim",
            "--trace",
            &trace,
            "--cold-start",
            cold_start,
            "--policy",
            policies,
        ];
        let args = <Argv as clap::Parser>::try_parse_from(argv)
            .map_err(|e| SimError::Usage(e.to_string()))?;
        Self::from_args(&args.sim)
    }

    /// Checks and resolves the arguments.
    pub fn from_args(args: &SimArgs) -> Result<Self, SimError> {
        // Before any work: a plot path that cannot be written fails now, not after the run.
        if let Some(path) = &args.plot {
            crate::bench::plot::check_svg(path).map_err(SimError::Usage)?;
        }
        let mut profile = load_profile(&args.profile)?;
        if let Some(start) = &args.cold_start {
            profile.cold_start_s = parse_duration_s(start)?;
        }
        let mut trace = Trace::load(&args.trace)?;
        if let Some(d) = &args.duration {
            trace.set_duration(parse_duration_s(d)?);
        }
        for spec in &args.batches {
            trace.batches.push(BatchJob::parse(spec)?);
        }
        if let Some(peak) = args.peak_rps {
            if peak.is_nan() || peak <= 0.0 {
                return Err(SimError::Usage("--peak-rps must be positive".into()));
            }
            trace.scale_peak(peak)?;
        }
        let slo = Slo {
            ttft_p95_s: parse_duration_s(&args.slo_ttft)?,
            tpot_p95_s: parse_duration_s(&args.slo_tpot)?,
        };
        if args.min_replicas > args.max_replicas {
            return Err(SimError::Usage(format!(
                "--min-replicas {} is above --max-replicas {}",
                args.min_replicas, args.max_replicas
            )));
        }
        if !(args.tick > 0.0 && args.tick <= 1.0) {
            return Err(SimError::Usage("--tick must be in (0, 1] seconds".into()));
        }
        if !(args.target_utilization > 0.0 && args.target_utilization <= 1.0) {
            return Err(SimError::Usage(
                "--target-utilization must be in (0, 1]".into(),
            ));
        }
        if args
            .hint_factor
            .is_some_and(|h| !(h.is_finite() && h > 0.0))
        {
            return Err(SimError::Usage("--hint-factor must be positive".into()));
        }
        if !(args.start_tail.is_finite() && (1.0..=10.0).contains(&args.start_tail)) {
            return Err(SimError::Usage(
                "--start-tail must be in [1, 10] (the 95th percentile over the median)".into(),
            ));
        }
        let gpu_wait_s = args.gpu_wait.as_deref().map(parse_duration_s).transpose()?;
        let policies = args
            .policy
            .split(',')
            .map(PolicyKind::parse)
            .collect::<Result<Vec<_>, _>>()?;
        let config = SimConfig {
            profile,
            slo,
            tick_s: args.tick,
            seed: args.seed,
            scrape_delay_s: args.scrape_delay,
            min_replicas: args.min_replicas,
            max_replicas: args.max_replicas,
            hint_factor: args.hint_factor,
            target_utilization: args.target_utilization,
            period_s: parse_duration_s(&args.period)?,
            hold_deadline_s: 60.0,
            start_tail: args.start_tail,
            gpu_wait_s: gpu_wait_s.unwrap_or(0.0),
            foresight: args.foresight == "on",
            prompt_token_cost: 0.0,
        };
        let knee = knee::find(&config.profile, &trace.classes, slo, config.tick_s);
        let mut config = config;
        config.prompt_token_cost = match args.prompt_token_cost {
            Some(cost) if cost.is_finite() && cost >= 0.0 => cost,
            Some(_) => {
                return Err(SimError::Usage(
                    "--prompt-token-cost must be a number ≥ 0".into(),
                ));
            }
            None => knee::prompt_token_cost(&config.profile, &trace.classes, &knee)
                .unwrap_or(tokenscale_scaling::autoscaler::DEFAULT_PROMPT_TOKEN_COST),
        };
        if knee.tokens_per_s <= 0.0 {
            return Err(SimError::Usage(format!(
                "one replica of `{}` cannot meet TTFT {} / TPOT {} for this trace's requests at any rate",
                config.profile.name, args.slo_ttft, args.slo_tpot
            )));
        }
        Ok(Self {
            config,
            trace,
            knee,
            policies,
        })
    }

    /// Runs every policy.
    pub fn run(&self) -> Vec<PolicyResult> {
        self.policies
            .iter()
            .map(|&kind| simulate(kind, &self.config, &self.knee, &self.trace))
            .collect()
    }

    /// The same comparison with the trace's batch jobs but `keep` (by index).
    pub fn with_batches(&self, keep: impl Fn(usize) -> bool) -> Self {
        let mut other = self.clone();
        other.trace.batches = (self.trace.batches.iter().enumerate())
            .filter(|(i, _)| keep(*i))
            .map(|(_, b)| *b)
            .collect();
        other
    }

    /// What the batch jobs did to each policy's run (`results`, from [`Comparison::run`]):
    /// the same runs without any job, and without each job in turn for its extra GPU-hours
    /// (one job: the same run). Empty when the trace has no batch jobs.
    pub fn batch_effects(&self, results: &[PolicyResult]) -> Vec<BatchEffect> {
        let jobs = self.trace.batches.len();
        if jobs == 0 {
            return Vec::new();
        }
        let none = self.with_batches(|_| false);
        self.policies
            .iter()
            .zip(results)
            .map(|(&kind, with)| {
                let without = simulate(kind, &none.config, &none.knee, &none.trace);
                let extra_gpu_hours = (0..jobs)
                    .map(|job| {
                        let rest = if jobs == 1 {
                            without.gpu_hours
                        } else {
                            let c = self.with_batches(|i| i != job);
                            simulate(kind, &c.config, &c.knee, &c.trace).gpu_hours
                        };
                        with.gpu_hours - rest
                    })
                    .collect();
                BatchEffect {
                    with: with.clone(),
                    without,
                    extra_gpu_hours,
                }
            })
            .collect()
    }
}

/// One policy's run with the trace's batch jobs against the same run without them.
#[derive(Debug, Clone)]
pub struct BatchEffect {
    /// The run with every job (its `batches` say what became of each).
    pub with: PolicyResult,
    /// The run without any.
    pub without: PolicyResult,
    /// GPU-hours each job added: the run with every job less the run without that one.
    pub extra_gpu_hours: Vec<f64>,
}

/// `tokenscale sim`: runs and prints the table (or JSON), and writes the plot.
pub fn run_command(args: &SimArgs) -> Result<String, SimError> {
    let comparison = Comparison::from_args(args)?;
    let results = comparison.run();
    if let Some(path) = &args.plot {
        plot::write(path, &comparison.trace.name, &results)?;
    }
    let effects = comparison.batch_effects(&results);
    Ok(if args.json {
        report::json(&results, &effects)
    } else {
        let mut table = report::table(&comparison, &results);
        table.push_str(&report::batch_table(&effects));
        table
    })
}
