//! The policies a simulation compares: `tokenscale` (the operator's own scaling loop, ticked
//! on a scrape of the simulated gateway), `hpa` (Kubernetes HPA on in-flight requests per
//! replica), `static:N` and `oracle` (knows the future rate and the true capacity: the lower
//! bound on GPU-hours).

use std::collections::VecDeque;
use std::fmt;

use tokenscale_scaling::autoscaler::Clocks;
use tokenscale_scaling::scale::ReplicaCounts;
use tokenscale_scaling::scaling::ScalingLoop;

use super::SimError;
use super::exposition::BatchGauges;
use super::fleet::Fleet;
use super::metrics::Recorder;
use super::trace::Trace;

/// The wall clock the simulation starts at (2026-01-01T00:00:00Z): the scaling loop's SLO
/// record keeps wall-clock minutes.
const SIM_EPOCH_UNIX_S: f64 = 1_767_225_600.0;

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
    /// The operator's policy planning with a fixed 60 s lead (the CRD's default
    /// `startupTime`), never with the starts it measures: the policy before it measured them.
    TokenscaleFixedLead,
    /// Kubernetes HPA on in-flight requests.
    Hpa,
    /// A fixed replica count.
    Static(u32),
    /// Perfect foresight, sized for this percentage of the coming peak (`oracle` is 100:
    /// exactly the peak at the deterministic knee; more is headroom against arrival noise,
    /// which the plain oracle does not have, so it misses minutes itself).
    Oracle(u32),
    /// The oracle without foresight: it knows the true capacity and the rate now, the moment
    /// it changes (no detection delay, no arrival noise), decides every second and sizes for
    /// this percentage of the rate now (`reactive` is 100), but sees nothing coming: each
    /// abrupt rise beyond its headroom waits one replica start, as it would for any policy
    /// that did not see that rise coming (a policy that extrapolates ramps or learns
    /// recurrence can do better on those).
    Reactive(u32),
}

impl PolicyKind {
    /// Parses `tokenscale`, `tokenscale-fixed-lead`, `hpa`, `static:N`, `oracle`, `oracle:PERCENT`,
    /// `reactive` or `reactive:PERCENT` (PERCENT 100 to 1000).
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let number = |prefix: &str, text: &str| text.strip_prefix(prefix)?.parse::<u32>().ok();
        match text.trim() {
            "tokenscale" => Ok(Self::Tokenscale),
            "tokenscale-fixed-lead" => Ok(Self::TokenscaleFixedLead),
            "hpa" => Ok(Self::Hpa),
            "oracle" => Ok(Self::Oracle(100)),
            "reactive" => Ok(Self::Reactive(100)),
            other => {
                if let Some(n) = number("static:", other) {
                    return Ok(Self::Static(n));
                }
                let percent = |prefix| number(prefix, other).filter(|p| (100..=1000).contains(p));
                if let Some(percent) = percent("oracle:") {
                    return Ok(Self::Oracle(percent));
                }
                percent("reactive:").map(Self::Reactive).ok_or_else(|| {
                    SimError::Usage(format!(
                        "unknown policy `{other}`: use tokenscale, tokenscale-fixed-lead, hpa, static:N, oracle, \
                         oracle:PERCENT, reactive or reactive:PERCENT (PERCENT 100 to 1000)"
                    ))
                })
            }
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tokenscale => f.write_str("tokenscale"),
            Self::TokenscaleFixedLead => f.write_str("tokenscale-fixed-lead"),
            Self::Hpa => f.write_str("hpa"),
            Self::Static(n) => write!(f, "static:{n}"),
            Self::Oracle(100) => f.write_str("oracle"),
            Self::Oracle(percent) => write!(f, "oracle:{percent}"),
            Self::Reactive(100) => f.write_str("reactive"),
            Self::Reactive(percent) => write!(f, "reactive:{percent}"),
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
    /// The operator's scaling loop.
    Tokenscale {
        scaling: ScalingLoop,
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
    /// request / true capacity); `reactive` looks no further than its next decision and back
    /// over the scale-in window instead.
    Oracle {
        capacity_tokens_per_s: f64,
        tokens_per_request: f64,
        lookahead_s: f64,
        lookback_s: f64,
        period_s: f64,
        min: u32,
        max: u32,
    },
}

impl Controller {
    /// How often it decides, seconds.
    pub fn period_s(&self) -> f64 {
        match self {
            Self::Tokenscale { scaling, .. } => scaling.spec().period.as_secs_f64(),
            Self::Hpa { .. } => HPA_PERIOD_S,
            Self::Static(_) => f64::INFINITY,
            Self::Oracle { period_s, .. } => *period_s,
        }
    }

    /// Desired replicas now.
    pub fn decide(&mut self, input: &DecideInput) -> u32 {
        match self {
            Self::Tokenscale {
                scaling,
                last_reason,
            } => {
                let tick = scaling.tick(clocks(input.now_s), &scrape(input), counts(input.fleet));
                *last_reason = tick.decision.message;
                tick.target_replicas
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
                lookback_s,
                period_s,
                min,
                max,
            } => {
                let horizon_s = *lookahead_s + *period_s;
                let peak_rps = (-(lookback_s.ceil() as i64)..=horizon_s.ceil() as i64)
                    .map(|s| input.trace.rate_rps((input.now_s + s as f64).max(0.0)))
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

impl Controller {
    /// Between decisions: scrapes without deciding, so the loop's windows are sampled finer
    /// than its period (and the first decision finds them warm, as a real operator would
    /// from a gateway that ran before it); the fleet's counts too, so replica starts are
    /// timed to the scrape as the operator times them to its reconciles.
    pub fn scrape(&mut self, input: &DecideInput) {
        if let Self::Tokenscale { scaling, .. } = self {
            scaling.record(input.now_s, &scrape(input));
            scaling.observe_counts(input.now_s, counts(input.fleet));
        }
    }

    /// After a scrape: whether the loop wants to decide now, not at its next period: at zero
    /// replicas for a first one (as the operator's queue watch and `up` make it do), or for a
    /// rise the scrapes show (as every scaler does).
    pub fn wants_to_decide_now(&mut self, input: &DecideInput) -> bool {
        match self {
            Self::Tokenscale { scaling, .. } => {
                let counts = counts(input.fleet);
                scaling.wants_a_first_replica(input.now_s, counts)
                    || scaling.rise_seen(input.now_s, counts)
            }
            _ => false,
        }
    }
}

/// The policy clock on the simulation's wall clock.
fn clocks(now_s: f64) -> Clocks {
    Clocks::from_unix_s(now_s, SIM_EPOCH_UNIX_S + now_s)
}

/// The simulated gateway's `/metrics` as a scrape now sees them (`scrape_delay_s` old).
fn scrape(input: &DecideInput) -> tokenscale_scaling::metrics_source::ScrapeRound {
    let batch = BatchGauges {
        backlog_tokens: input.batch_backlog_tokens,
        required_tokens_per_s: input.batch_required_tokens_per_s,
    };
    let now_second = input.now_s.max(0.0) as u64;
    input
        .rec
        .exposition
        .scrape(now_second, input.scrape_delay_s, batch)
}

/// The scale target's counts, read live as from the API server: the target is ready plus
/// starting replicas (draining ones are already gone from it).
fn counts(fleet: &Fleet) -> ReplicaCounts {
    ReplicaCounts {
        desired: fleet.target(),
        current: fleet.target(),
        ready: fleet.ready(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print_back() {
        for text in [
            "tokenscale",
            "tokenscale-fixed-lead",
            "hpa",
            "static:3",
            "oracle",
            "oracle:120",
            "reactive",
            "reactive:150",
        ] {
            let kind = PolicyKind::parse(text).expect("a policy");
            assert_eq!(kind.to_string(), text);
        }
        assert_eq!(
            PolicyKind::parse("oracle:100").ok(),
            Some(PolicyKind::Oracle(100))
        );
        assert_eq!(
            PolicyKind::parse("reactive:100").ok(),
            Some(PolicyKind::Reactive(100))
        );
        for bad in [
            "oracle:99",
            "oracle:1001",
            "oracle:x",
            "reactive:50",
            "static:",
            "hpa2",
        ] {
            let error = PolicyKind::parse(bad).expect_err(bad).to_string();
            assert!(error.contains(&format!("`{bad}`")), "{error}");
        }
    }
}
