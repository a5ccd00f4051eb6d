//! The policies a simulation compares: `tokenscale` (the operator's real `decide`), `hpa`
//! (Kubernetes HPA on in-flight requests per replica), `static:N` and `oracle` (knows the
//! future rate and the true capacity: the lower bound on GPU-hours).

use std::collections::VecDeque;
use std::fmt;

use tokenscale_operator::autoscaler::{
    BatchDemand, Demand, Observations, PolicySpec, PolicyState, WindowedRate, decide,
};

use super::SimError;
use super::fleet::Fleet;
use super::metrics::Recorder;
use super::trace::Trace;

/// HPA's defaults: sync every 15 s, ±10% tolerance, 5-minute scale-down stabilisation,
/// scale-up by at most max(100%, 4 pods) per period.
const HPA_PERIOD_S: f64 = 15.0;
const HPA_TOLERANCE: f64 = 0.1;
const HPA_DOWN_STABILIZATION_S: f64 = 300.0;

/// Which policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// The operator's policy.
    Tokenscale,
    /// Kubernetes HPA on in-flight requests.
    Hpa,
    /// A fixed replica count.
    Static(u32),
    /// Perfect foresight.
    Oracle,
}

impl PolicyKind {
    /// Parses `tokenscale`, `hpa`, `static:N` or `oracle`.
    pub fn parse(text: &str) -> Result<Self, SimError> {
        match text.trim() {
            "tokenscale" => Ok(Self::Tokenscale),
            "hpa" => Ok(Self::Hpa),
            "oracle" => Ok(Self::Oracle),
            other => other
                .strip_prefix("static:")
                .and_then(|n| n.parse().ok())
                .map(Self::Static)
                .ok_or_else(|| {
                    SimError::Usage(format!(
                        "unknown policy `{other}`: use tokenscale, hpa, static:N or oracle"
                    ))
                }),
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tokenscale => f.write_str("tokenscale"),
            Self::Hpa => f.write_str("hpa"),
            Self::Static(n) => write!(f, "static:{n}"),
            Self::Oracle => f.write_str("oracle"),
        }
    }
}

/// What every controller may read when it decides.
pub struct DecideInput<'a> {
    /// Simulated time.
    pub now_s: f64,
    /// The fleet (replica counts are read live, as from the API server).
    pub fleet: &'a Fleet,
    /// Metrics (read with the scrape delay).
    pub rec: &'a Recorder,
    /// The trace (only the oracle looks at its future).
    pub trace: &'a Trace,
    /// Metric scrape delay, seconds.
    pub scrape_delay_s: u64,
    /// Output tokens running batch jobs have left (the gateway's gauge).
    pub batch_backlog_tokens: f64,
    /// Output tokens/s that finish every running batch by its deadline (the gateway's gauge).
    pub batch_required_tokens_per_s: f64,
}

/// A running controller.
// A few per simulation, made once: boxing the policy's variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Controller {
    /// The operator's policy, with its memory.
    Tokenscale {
        spec: PolicySpec,
        state: PolicyState,
        last_reason: String,
    },
    /// HPA with its recommendation history.
    Hpa {
        target_in_flight: f64,
        history: VecDeque<(f64, u32)>,
        min: u32,
        max: u32,
    },
    /// Fixed count.
    Static(u32),
    /// Foresight: replicas = ceil(peak rate over the coming period and cold start × tokens per
    /// request / true capacity).
    Oracle {
        capacity_tokens_per_s: f64,
        tokens_per_request: f64,
        lookahead_s: f64,
        period_s: f64,
        min: u32,
        max: u32,
    },
}

impl Controller {
    /// How often it decides, seconds.
    pub fn period_s(&self) -> f64 {
        match self {
            Self::Tokenscale { spec, .. } => spec.period.as_secs_f64(),
            Self::Hpa { .. } => HPA_PERIOD_S,
            Self::Static(_) => f64::INFINITY,
            Self::Oracle { period_s, .. } => *period_s,
        }
    }

    /// Desired replicas now.
    pub fn decide(&mut self, input: &DecideInput) -> u32 {
        match self {
            Self::Tokenscale {
                spec,
                state,
                last_reason,
            } => {
                let obs = observe(spec, input);
                let decision = decide(spec, &obs, state, input.now_s);
                *last_reason = decision.message;
                decision.replicas
            }
            Self::Hpa {
                target_in_flight,
                history,
                min,
                max,
            } => hpa(input, *target_in_flight, history, *min, *max),
            Self::Static(n) => *n,
            Self::Oracle {
                capacity_tokens_per_s,
                tokens_per_request,
                lookahead_s,
                period_s,
                min,
                max,
            } => {
                let horizon_s = *lookahead_s + *period_s;
                let peak_rps = (0..=horizon_s.ceil() as u64)
                    .map(|s| input.trace.rate_rps(input.now_s + s as f64))
                    .fold(0.0, f64::max);
                let peak = peak_rps * *tokens_per_request;
                let need = (peak / *capacity_tokens_per_s).ceil();
                // Batch work on what those replicas leave idle, and replicas for the rest: the
                // same rule as tokenscale's, at the true capacity.
                let idle = need * *capacity_tokens_per_s - peak;
                let batch = ((input.batch_required_tokens_per_s - idle).max(0.0)
                    / *capacity_tokens_per_s)
                    .ceil();
                ((need + batch) as u32).clamp(*min, *max)
            }
        }
    }
}

/// The operator's observations, built from the gateway's metrics as a scrape would see them.
fn observe(spec: &PolicySpec, input: &DecideInput) -> Observations {
    let stable = input
        .rec
        .window(spec.stable_window.as_secs(), input.scrape_delay_s);
    let panic = input
        .rec
        .window(spec.panic_window.as_secs(), input.scrape_delay_s);
    Observations {
        ready_replicas: input.fleet.ready(),
        pending_replicas: input.fleet.starting(),
        current_replicas: input.fleet.target(),
        demand: Some(Demand {
            output_tokens_per_s: WindowedRate {
                stable: stable.served_tokens_per_s,
                panic: panic.served_tokens_per_s,
            },
            arrival_requests_per_s: WindowedRate {
                stable: stable.arrivals_per_s,
                panic: panic.arrivals_per_s,
            },
            mean_output_tokens_per_request: stable.mean_output_tokens,
            queued_requests: stable.queued.round() as u64,
            running_requests: stable.running.round() as u64,
            completed_requests: stable.completed.round() as u64,
            source: Default::default(),
            // The gateway's batch gauges and counter. Batch lines are served outside the
            // fluid replicas, so no interactive figure above holds any to take off.
            batch: BatchDemand {
                required_output_tokens_per_s: input.batch_required_tokens_per_s,
                backlog_output_tokens: input.batch_backlog_tokens,
                output_tokens_per_s: WindowedRate {
                    stable: stable.batch_tokens_per_s,
                    panic: panic.batch_tokens_per_s,
                },
                in_flight_requests: 0,
            },
        }),
        ttft_p95_s: stable.ttft_p95_s,
        tpot_p95_s: stable.tpot_p95_s,
        replica_loads: Vec::new(),
    }
}

/// HPA: desired = ceil(in-flight / target), within tolerance keep; scale-down to the highest
/// recommendation of the last 5 minutes; scale-up at most max(2×, +4) per period.
fn hpa(
    input: &DecideInput,
    target: f64,
    history: &mut VecDeque<(f64, u32)>,
    min: u32,
    max: u32,
) -> u32 {
    let current = input.fleet.target();
    let view = input.rec.window(1, input.scrape_delay_s);
    let in_flight = view.queued + view.running;
    let ratio = in_flight / (f64::from(current.max(1)) * target);
    let raw = if current > 0 && (ratio - 1.0).abs() <= HPA_TOLERANCE {
        current
    } else {
        (in_flight / target).ceil() as u32
    };
    let raw = raw.clamp(min, max);
    history.push_back((input.now_s, raw));
    while history
        .front()
        .is_some_and(|&(t, _)| t < input.now_s - HPA_DOWN_STABILIZATION_S)
    {
        history.pop_front();
    }
    if raw >= current {
        raw.min((current * 2).max(current + 4))
    } else {
        history
            .iter()
            .map(|&(_, r)| r)
            .max()
            .unwrap_or(raw)
            .min(current)
    }
}
