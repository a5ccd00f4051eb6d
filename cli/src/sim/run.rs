//! The simulation loop: each tick, arrivals reach the gateway, the picker spreads them, every
//! replica group runs its steps; each policy period the controller decides and the scale
//! target follows (new replicas after the cold start). Scored on ground truth.

use std::collections::VecDeque;
use std::time::Duration;

use tokenscale_common::perf_model::PerfProfile;
use tokenscale_scaling::autoscaler::{PolicySpec, Slo};
use tokenscale_scaling::scaling::ScalingLoop;

use super::batch::{BatchOutcome, Batches};
use super::fleet::Fleet;
use super::knee::Knee;
use super::metrics::Recorder;
use super::policy::{Controller, DecideInput, PolicyKind};
use super::replica::TickContext;
use super::rng::Rng;
use super::start::StartTimes;
use super::trace::Trace;

/// Everything fixed across the policies of one comparison.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The performance model.
    pub profile: PerfProfile,
    /// The SLO.
    pub slo: Slo,
    /// Tick length, seconds.
    pub tick_s: f64,
    /// Arrival noise seed.
    pub seed: u64,
    /// Metrics reach the operator this late, seconds.
    pub scrape_delay_s: u64,
    /// Replica bounds for every policy.
    pub min_replicas: u32,
    /// Replica bounds for every policy.
    pub max_replicas: u32,
    /// The tokenscale policy's capacity hint = true capacity × this (1.0: a correct bench);
    /// `None`: no hint, the capacity is learned from measurements.
    pub hint_factor: Option<f64>,
    /// The tokenscale policy's target utilisation.
    pub target_utilization: f64,
    /// The tokenscale policy's decision period, seconds.
    pub period_s: f64,
    /// Requests held at the gateway longer than this with no replica are rejected.
    pub hold_deadline_s: f64,
    /// Replica starts: the 95th percentile over the median (the profile's `cold_start_s`).
    /// The tokenscale policy is never told the start time: it starts from the CRD's default
    /// hint and plans with the starts it measures, as the operator does.
    pub start_tail: f64,
    /// Seconds a new replica waits for a free GPU before its start begins.
    pub gpu_wait_s: f64,
    /// The tokenscale policy's foresight (`PolicySpec::foresight`): `--foresight`.
    pub foresight: bool,
    /// The tokenscale policy's cost of a prompt token in output tokens (`PolicySpec`'s
    /// `prompt_token_cost`): the profile's at the knee unless `--prompt-token-cost` says.
    pub prompt_token_cost: f64,
}

impl SimConfig {
    /// The start-time distribution of this run's replicas.
    pub fn start_times(&self) -> StartTimes {
        StartTimes::new(
            self.profile.cold_start_s,
            self.start_tail,
            self.gpu_wait_s,
            self.seed,
        )
    }
}

/// One point of the plotted series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeriesPoint {
    /// Time, seconds.
    pub t_s: f64,
    /// Arrivals over the last sample interval, requests/s.
    pub demand_rps: f64,
    /// Replicas holding devices.
    pub replicas: u32,
    /// Ready replicas.
    pub ready: u32,
    /// Capacity the ready replicas had left within the SLO (at the knee) beyond the
    /// interactive tokens they served, over the last sample interval, output tokens/s: what
    /// batch work may use (and, with batch jobs, did in part).
    pub idle_tokens_per_s: f64,
}

/// One policy's scores.
#[derive(Debug, Clone)]
pub struct PolicyResult {
    /// Policy name.
    pub policy: String,
    /// Share of minutes whose p95 TTFT and p95 TPOT met the SLO.
    pub slo_minute_attainment: f64,
    /// The minutes (from the start) that missed it.
    pub missed_minutes: Vec<u32>,
    /// Share of requests within both targets.
    pub request_attainment: f64,
    /// Device-hours held (ready, starting or draining).
    pub gpu_hours: f64,
    /// Output tokens of requests within the SLO, per second per device.
    pub goodput_tokens_per_s_per_gpu: f64,
    /// Times the scale target changed.
    pub scale_events: u32,
    /// Times the direction of change flipped (up after down or down after up).
    pub direction_changes: u32,
    /// Most replicas held at once.
    pub peak_replicas: u32,
    /// Requests completed (or rejected).
    pub requests: f64,
    /// Requests rejected at the gateway.
    pub rejected: f64,
    /// Requests preempted in engines.
    pub preemptions: f64,
    /// Demand and replicas every sample interval.
    pub series: Vec<SeriesPoint>,
    /// The last decision's reason (tokenscale only).
    pub last_reason: String,
    /// The lead time tokenscale planned with at the end, seconds: the measured replica
    /// starts' 90th percentile, or its hint before any (tokenscale only).
    pub lead_time_s: Option<f64>,
    /// What became of the trace's batch jobs, in the trace's order.
    pub batches: Vec<BatchOutcome>,
}

const SAMPLE_S: f64 = 30.0;
/// The simulated gateway is scraped this often between decisions.
const SCRAPE_EVERY_S: f64 = 1.0;

/// Builds the controller for `kind`.
pub fn controller(kind: PolicyKind, cfg: &SimConfig, knee: &Knee, trace: &Trace) -> Controller {
    let devices = f64::from(cfg.profile.devices_per_replica());
    // Sized for `percent`% of the peak rate from `lookback_s` before now to `lookahead_s`
    // plus a period after, at the true capacity.
    let oracle =
        |percent: u32, lookahead_s: f64, lookback_s: f64, period_s: f64| Controller::Oracle {
            capacity_tokens_per_s: (knee.tokens_per_s * 100.0 / f64::from(percent)).max(1e-9),
            tokens_per_request: trace.mean_output_tokens(),
            lookahead_s,
            lookback_s,
            period_s,
            min: cfg.min_replicas,
            max: cfg.max_replicas,
        };
    match kind {
        PolicyKind::Tokenscale | PolicyKind::TokenscaleFixedLead => {
            let mut spec = PolicySpec::new(cfg.min_replicas, cfg.max_replicas, cfg.slo);
            spec.target_utilization = cfg.target_utilization;
            spec.gpus_per_replica = cfg.profile.devices_per_replica();
            spec.period = Duration::from_secs_f64(cfg.period_s);
            spec.foresight = cfg.foresight;
            spec.prompt_token_cost = cfg.prompt_token_cost;
            spec.initial_tokens_per_s_per_gpu =
                (cfg.hint_factor).map(|hint| knee.tokens_per_s * hint / devices);
            let scaling = ScalingLoop::new(spec);
            Controller::Tokenscale {
                scaling: if kind == PolicyKind::TokenscaleFixedLead {
                    scaling.with_fixed_lead_time()
                } else {
                    scaling
                },
                last_reason: String::new(),
            }
        }
        PolicyKind::Hpa => Controller::Hpa {
            target_in_flight: (knee.in_flight * cfg.target_utilization).max(1.0),
            history: VecDeque::new(),
            min: cfg.min_replicas,
            max: cfg.max_replicas,
        },
        PolicyKind::Static(n) => Controller::Static(n),
        // The oracle knows the future's demand a median start ahead, not each start's draw.
        PolicyKind::Oracle(percent) => oracle(
            percent,
            cfg.start_times().median_s(),
            0.0,
            Duration::from_secs(10).as_secs_f64(),
        ),
        // The same sizing with no look ahead, at the scrape cadence: the rate now (and the
        // second to the next decision), at once; it scales in as tokenscale does by default,
        // after the rate has stayed lower for the scale-in window.
        PolicyKind::Reactive(percent) => oracle(
            percent,
            0.0,
            (PolicySpec::new(cfg.min_replicas, cfg.max_replicas, cfg.slo))
                .scale_down_stabilization
                .as_secs_f64(),
            SCRAPE_EVERY_S,
        ),
    }
}

/// Replicas every dynamic policy starts with: what the first minute needs at the true capacity.
fn initial_replicas(kind: PolicyKind, cfg: &SimConfig, knee: &Knee, trace: &Trace) -> u32 {
    if let PolicyKind::Static(n) = kind {
        return n;
    }
    let peak = (0..60)
        .map(|s| trace.rate_rps(f64::from(s)))
        .fold(0.0, f64::max);
    let need = (peak * trace.mean_output_tokens()
        / (knee.tokens_per_s * cfg.target_utilization).max(1e-9))
    .ceil() as u32;
    need.clamp(cfg.min_replicas, cfg.max_replicas)
}

/// Simulates `trace` under one policy.
pub fn simulate(kind: PolicyKind, cfg: &SimConfig, knee: &Knee, trace: &Trace) -> PolicyResult {
    let mut trace = trace.clone();
    let mut rng = Rng::new(cfg.seed);
    let mut rec = Recorder::new(cfg.slo.ttft_p95_s, cfg.slo.tpot_p95_s);
    let mut fleet = Fleet::new(
        initial_replicas(kind, cfg, knee, &trace),
        cfg.start_times(),
        cfg.hold_deadline_s,
    );
    let mut control = controller(kind, cfg, knee, &trace);
    let classes = trace.classes.clone();
    let ctx = TickContext {
        profile: &cfg.profile,
        classes: &classes,
        slo: cfg.slo,
    };
    let devices = f64::from(cfg.profile.devices_per_replica());
    let mut batches = Batches::new(&trace.batches);

    let ticks = (trace.duration_s / cfg.tick_s).ceil() as u64;
    // The first decision waits for one full stable window of metrics (a real operator reads
    // warm windows from the gateway; an empty window would look like a demand ramp).
    let first_decision_s = 60.0 + cfg.scrape_delay_s as f64;
    let (mut device_s, mut next_decision_s, mut next_sample_s) = (0.0, first_decision_s, 0.0);
    // Scrapes between decisions, one a second, fill the loop's metrics windows: sampled only
    // at decisions (once a period), the 6 s panic window reads a whole period (see the
    // operator README), and the family costs 5-10% more GPU-hours.
    let mut next_scrape_s = 0.0;
    let (mut events, mut flips, mut last_direction, mut peak) =
        (0u32, 0u32, 0i8, fleet.allocated());
    let mut series = Vec::new();
    let (mut sampled_arrivals, mut sampled_idle_tokens) = (0.0, 0.0);
    for tick in 0..ticks {
        let t_s = tick as f64 * cfg.tick_s;
        rec.set_time(t_s);
        let arrivals = trace.arrivals(t_s, cfg.tick_s, &mut rng);
        let arrived: f64 = arrivals.iter().sum();
        sampled_arrivals += arrived;
        let prompt_tokens: f64 = (arrivals.iter().zip(&classes))
            .map(|(count, class)| count * class.input_tokens)
            .sum();
        rec.arrived(arrived, prompt_tokens);
        let interactive_before = rec.served_tokens;
        fleet.dispatch(&arrivals, t_s, cfg.tick_s, &mut rec);
        fleet.tick(&ctx, t_s, cfg.tick_s, &mut rec);
        // Batch lines get what the ready replicas can serve within the SLO (the knee) beyond
        // the interactive tokens they served this tick; they are not in the fluid replicas, so
        // the interactive requests' latencies never see them.
        let interactive = rec.served_tokens - interactive_before;
        let idle =
            (f64::from(fleet.ready()) * knee.tokens_per_s * cfg.tick_s - interactive).max(0.0);
        sampled_idle_tokens += idle;
        if batches.any_left() {
            let served = batches.serve(t_s, t_s + cfg.tick_s, idle);
            rec.batch_served(served);
        }
        let (queued, running) = fleet.queued_and_running();
        rec.gauges(queued, running);
        device_s += f64::from(fleet.allocated()) * devices * cfg.tick_s;
        peak = peak.max(fleet.allocated());

        let decision_due = t_s >= next_decision_s;
        if decision_due || t_s >= next_scrape_s {
            let (batch_backlog_tokens, batch_required_tokens_per_s) = batches.gauges(t_s);
            let input = DecideInput {
                now_s: t_s,
                fleet: &fleet,
                rec: &rec,
                trace: &trace,
                scrape_delay_s: cfg.scrape_delay_s,
                batch_backlog_tokens,
                batch_required_tokens_per_s,
            };
            let mut decide = decision_due;
            if !decision_due {
                // Between decisions a scrape feeds the loop's metrics windows, and decides
                // only for a first request at zero replicas or a rise it shows.
                control.scrape(&input);
                next_scrape_s += SCRAPE_EVERY_S;
                decide = control.wants_to_decide_now(&input);
            }
            if decide {
                let desired = control.decide(&input);
                let current = fleet.target();
                if desired != current {
                    let direction = if desired > current { 1 } else { -1 };
                    events += 1;
                    flips += u32::from(last_direction != 0 && direction != last_direction);
                    last_direction = direction;
                    fleet.set_target(desired, t_s);
                }
                fleet.consolidate(t_s);
                if decision_due {
                    next_decision_s += control.period_s();
                }
            }
        }
        if t_s >= next_sample_s {
            series.push(SeriesPoint {
                t_s,
                demand_rps: sampled_arrivals / SAMPLE_S,
                idle_tokens_per_s: sampled_idle_tokens / SAMPLE_S,
                replicas: fleet.allocated(),
                ready: fleet.ready(),
            });
            (sampled_arrivals, sampled_idle_tokens) = (0.0, 0.0);
            next_sample_s += SAMPLE_S;
        }
    }
    let mut result = score(
        kind,
        &rec,
        device_s,
        trace.duration_s,
        events,
        flips,
        peak,
        series,
        control,
    );
    result.batches = batches.outcomes();
    result
}

#[allow(clippy::too_many_arguments)]
fn score(
    kind: PolicyKind,
    rec: &Recorder,
    device_s: f64,
    duration_s: f64,
    scale_events: u32,
    direction_changes: u32,
    peak_replicas: u32,
    series: Vec<SeriesPoint>,
    control: Controller,
) -> PolicyResult {
    let minutes = ((duration_s / 60.0).floor() as usize).max(1);
    let missed_minutes: Vec<u32> = (0..minutes)
        .filter(|&m| rec.minutes.get(m).is_some_and(|minute| !minute.met()))
        .map(|m| m as u32)
        .collect();
    let met = minutes - missed_minutes.len();
    let (last_reason, lead_time_s) = match control {
        Controller::Tokenscale {
            last_reason,
            scaling,
        } => (last_reason, Some(scaling.lead_time_s())),
        _ => (String::new(), None),
    };
    PolicyResult {
        policy: kind.to_string(),
        slo_minute_attainment: met as f64 / minutes as f64,
        missed_minutes,
        request_attainment: if rec.completed > 0.0 {
            rec.completed_ok / rec.completed
        } else {
            1.0
        },
        gpu_hours: device_s / 3600.0,
        goodput_tokens_per_s_per_gpu: if device_s > 0.0 {
            rec.goodput_tokens / device_s
        } else {
            0.0
        },
        scale_events,
        direction_changes,
        peak_replicas,
        requests: rec.completed,
        rejected: rec.rejected,
        preemptions: rec.preemptions,
        series,
        last_reason,
        lead_time_s,
        batches: Vec::new(),
    }
}
