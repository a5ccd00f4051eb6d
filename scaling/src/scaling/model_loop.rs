//! One model's scaling loop: everything remembered between periods (policy state, metrics
//! windows, SLO history, removal marks, the last tick) and the tick that turns one period's
//! scrape and replica counts into what to do.

use super::attainment::{Attainment, PeriodSample, SloHistory};
use super::cold_start::ColdStarts;
use crate::autoscaler::Demand;
use crate::autoscaler::{
    Clocks, Decision, Observations, PolicySnapshot, PolicySpec, PolicyState, RISE_SCRAPES, decide,
    rise_outgrows, snapshot, work,
};
use crate::metrics_source::{MetricsView, ModelMetrics, ScrapeRound};
use crate::scale::ReplicaCounts;

/// Arrivals in the stable window below which a prompt mix is not taken as the reference.
const MIN_REFERENCE_ARRIVALS: f64 = 200.0;

/// Metrics older than this many periods are stale: the policy holds rather than act on them.
const STALE_AFTER_PERIODS: f64 = 3.0;

/// Replicas asked for that do not serve yet: capacity on the way, counted once (see the
/// module docs for why `desired − ready`).
pub fn pending_replicas(counts: ReplicaCounts) -> u32 {
    counts.desired.saturating_sub(counts.ready)
}

/// The policy's input for one period: the scale target's counts and the windowed metrics.
/// The only place `Observations` are built outside the policy's own tests.
pub fn observations(counts: ReplicaCounts, view: &MetricsView) -> Observations {
    Observations {
        ready_replicas: counts.ready,
        pending_replicas: pending_replicas(counts),
        current_replicas: counts.desired,
        demand: view.demand.clone(),
        ttft_p95_s: view.ttft_p95_s,
        tpot_p95_s: view.tpot_p95_s,
        replica_loads: view.replica_loads.clone(),
        concurrency_cap: view.concurrency_cap,
    }
}

/// Ready replicas a scale-in to `target` removes: a ReplicaSet (and `up`'s pool) removes
/// replicas that are not ready first, so of the `current − target` that go only
/// `ready − target` are ready ones, and those are the ones worth choosing.
pub fn ready_to_mark(counts: ReplicaCounts, target: u32) -> u32 {
    if target < counts.desired {
        counts.ready.saturating_sub(target)
    } else {
        0
    }
}

/// What one period decided, and what status and the status line show of it.
#[derive(Debug, Clone)]
pub struct Tick {
    /// When it was taken.
    pub clocks: Clocks,
    /// The scale target's counts it was taken with.
    pub counts: ReplicaCounts,
    /// What the policy saw.
    pub observations: Observations,
    /// The windowed metrics behind them (for status: loads, revisions, missing signals).
    pub view: MetricsView,
    /// The policy's decision.
    pub decision: Decision,
    /// Replicas to ask the scale target for: the decision's, unless a GPU budget limited it
    /// (see [`Tick::limit_to`]).
    pub target_replicas: u32,
    /// Ready replicas to mark for removal before scaling in (see [`ready_to_mark`]).
    pub mark_for_removal: u32,
    /// Replicas the previous scale-in marked, whose marks may need clearing.
    pub marked_before: Vec<String>,
    /// The SLO record's attainment and goodput, this period included.
    pub attainment: Attainment,
    /// The time to capacity the policy planned with, seconds (see
    /// [`ScalingLoop::lead_time_s`]).
    pub lead_time_s: f64,
}

impl Tick {
    /// Whether the scale target must change.
    pub fn scales(&self) -> bool {
        self.target_replicas != self.counts.desired
    }

    /// Whether the change is a scale-in (marks first).
    pub fn scales_in(&self) -> bool {
        self.target_replicas < self.counts.desired
    }

    /// The GPU budget's hook: a grant of `replicas` replaces the decision's count.
    pub fn limit_to(&mut self, replicas: u32) {
        self.target_replicas = replicas;
        self.mark_for_removal = ready_to_mark(self.counts, replicas);
    }
}

/// One model's scaling loop.
#[derive(Debug, Clone)]
pub struct ScalingLoop {
    spec: PolicySpec,
    policy: PolicyState,
    metrics: ModelMetrics,
    slo: SloHistory,
    marked_for_removal: Vec<String>,
    cold_starts: ColdStarts,
    last: Option<Tick>,
    /// Consecutive scrapes that showed a rise (see [`ScalingLoop::rise_seen`]).
    rise_streak: u32,
    /// Plans with the spec's `startup_time` whatever the starts measure (see
    /// [`ScalingLoop::with_fixed_lead_time`]).
    fixed_lead: bool,
    /// The first prompt mix seen, `(prompt, output)` tokens a request: the mix the capacity
    /// is counted at (see [`crate::autoscaler::work`]).
    mix_reference: Option<(f64, f64)>,
}

impl ScalingLoop {
    /// A fresh loop for `spec`.
    pub fn new(spec: PolicySpec) -> Self {
        Self {
            policy: PolicyState::new(&spec),
            spec,
            metrics: ModelMetrics::default(),
            slo: SloHistory::default(),
            marked_for_removal: Vec::new(),
            cold_starts: ColdStarts::default(),
            last: None,
            rise_streak: 0,
            fixed_lead: false,
            mix_reference: None,
        }
    }

    /// A loop continuing where another process stopped: its policy state (already restored
    /// onto this process's clock), SLO record and removal marks. Metrics windows are not
    /// carried over: scrapes rebuild them within one stable window.
    pub fn resumed(
        spec: PolicySpec,
        policy: Option<PolicyState>,
        slo: SloHistory,
        marked_for_removal: Vec<String>,
    ) -> Self {
        let mut resumed = Self::new(spec);
        if let Some(mut policy) = policy {
            // A record from before the hint was set (or that learned nothing) keeps the hint.
            if policy.capacity_tokens_per_s_per_replica.is_none() {
                policy.capacity_tokens_per_s_per_replica =
                    resumed.policy.capacity_tokens_per_s_per_replica;
            }
            resumed.policy = policy;
        }
        resumed.slo = slo;
        resumed.marked_for_removal = marked_for_removal;
        resumed
    }

    /// Starts the cold-start measurement from the starts another process measured, oldest
    /// first (status carries them).
    pub fn with_cold_starts(mut self, measured_s: impl IntoIterator<Item = f64>) -> Self {
        self.cold_starts = ColdStarts::resumed(measured_s);
        self
    }

    /// Folds the scale target's counts in between ticks (the operator reads them at every
    /// reconcile, which a replica turning ready triggers): finer cold-start timing.
    pub fn observe_counts(&mut self, now_s: f64, counts: ReplicaCounts) {
        self.cold_starts.observe(now_s, counts);
    }

    /// The same loop planning with the spec's `startup_time` only, never with the starts it
    /// measures: the policy as it was before it measured them (the simulator's
    /// `tokenscale-fixed-lead`, to show what the measurement buys).
    pub fn with_fixed_lead_time(mut self) -> Self {
        self.fixed_lead = true;
        self
    }

    /// The longest of the latest measured cold starts, seconds (see [`ColdStarts`]).
    pub fn expected_cold_start_s(&self) -> Option<f64> {
        self.cold_starts.expected_s()
    }

    /// The measured cold starts kept, seconds, oldest first (for status).
    pub fn measured_cold_starts_s(&self) -> Vec<f64> {
        self.cold_starts.measured_s()
    }

    /// The time to capacity the policy plans with, seconds: a high quantile of this model's
    /// measured replica starts, or the spec's `startup_time` (the CRD's `scaling.startupTime`
    /// hint) until the first start has been measured.
    pub fn lead_time_s(&self) -> f64 {
        let measured = if self.fixed_lead {
            None
        } else {
            self.cold_starts.lead_time_s()
        };
        measured.unwrap_or(self.spec.startup_time.as_secs_f64())
    }

    /// The policy's spec.
    pub fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    /// Takes an edited spec (a new generation); what was learned stays.
    pub fn set_spec(&mut self, spec: PolicySpec) {
        self.spec = spec;
    }

    /// Folds a scrape round taken at `now_s` into the metrics windows without deciding (to
    /// warm the windows before the first decision). [`ScalingLoop::tick`] does this itself.
    pub fn record(&mut self, now_s: f64, round: &ScrapeRound) {
        // A little more than the stable window, so its baseline is always there.
        let keep_s = self.spec.stable_window.as_secs_f64() + self.stale_after_s();
        self.metrics.record(now_s, round, keep_s);
    }

    /// The windowed metrics at `now_s`.
    pub fn view(&self, now_s: f64) -> MetricsView {
        self.metrics.view(
            now_s,
            self.spec.stable_window.as_secs_f64(),
            self.spec.panic_window.as_secs_f64(),
            self.stale_after_s(),
        )
    }

    /// Whether the model, asked for no replica (`counts.desired` 0), wants a first one now
    /// (see [`crate::autoscaler::wants_a_first_replica`]): a scaler that samples between
    /// periods then ticks at once instead of leaving the first requests waiting a period.
    pub fn wants_a_first_replica(&self, now_s: f64, counts: ReplicaCounts) -> bool {
        counts.desired == 0
            && self
                .view(now_s)
                .demand
                .as_ref()
                .is_some_and(crate::autoscaler::wants_a_first_replica)
    }

    /// After a scrape between periods: whether the burst window has shown, on
    /// [`RISE_SCRAPES`] consecutive scrapes, a rise beyond noise that needs more replicas than
    /// are ready and on the way (see [`crate::autoscaler::rise_outgrows`]). A scaler then
    /// ticks at once instead of at its next period; the streak starts over.
    pub fn rise_seen(&mut self, now_s: f64, counts: ReplicaCounts) -> bool {
        let existing = counts.ready.max(counts.desired);
        let demand = self.weighed(self.view(now_s).demand.as_ref());
        let rising = demand.as_ref().is_some_and(|demand| {
            let tokens = demand
                .mean_output_tokens_per_request
                .filter(|t| t.is_finite() && *t > 0.0)
                .or(self.policy.mean_output_tokens)
                .unwrap_or(0.0);
            let capacity = self.policy.capacity_tokens_per_s_per_replica.unwrap_or(0.0);
            counts.desired > 0 && rise_outgrows(&self.spec, demand, tokens, capacity, existing)
        });
        self.rise_streak = if rising { self.rise_streak + 1 } else { 0 };
        let seen = self.rise_streak >= RISE_SCRAPES;
        if seen {
            self.rise_streak = 0;
        }
        seen
    }

    /// The scale target's counts as the last tick left them, its target applied: what a
    /// scaler that reads no counts between periods (the operator's sampler) checks a rise
    /// against (see [`ScalingLoop::rise_seen`]).
    pub fn counts_after_last_tick(&self) -> Option<ReplicaCounts> {
        self.last.as_ref().map(|tick| ReplicaCounts {
            desired: tick.target_replicas,
            current: tick.target_replicas,
            ready: tick.counts.ready,
        })
    }

    /// `demand` weighed by the prompt length of the stable window's arrivals against the
    /// reference mix (see [`crate::autoscaler::work`]); the first mix seen over enough
    /// arrivals becomes the reference. Both costs are taken at the reference's output length:
    /// the mean output comes from completions, which skew short while a backlog drains (short
    /// answers finish first), and that skew must not read as a shift in the prompts (weighed
    /// with it, the family cost up to 22% more GPU-hours on some seeds). Unchanged without the
    /// gateway's prompt counter.
    fn weighed(&mut self, demand: Option<&Demand>) -> Option<Demand> {
        let demand = demand?;
        let window_s = self.spec.stable_window.as_secs_f64();
        let output = demand
            .mean_output_tokens_per_request
            .or(self.policy.mean_output_tokens);
        let prompt = self.metrics.prompt_tokens_per_arrival(window_s);
        let cost = |prompt: f64, output: f64| {
            work::cost_per_output_token(self.spec.prompt_token_cost, prompt, output)
        };
        let weight = match (prompt, self.mix_reference) {
            (Some(now), Some((prompt_then, output_then))) => {
                match (cost(prompt_then, output_then), cost(now, output_then)) {
                    (Some(then), Some(now)) => work::mix_weight(then, now),
                    _ => 1.0,
                }
            }
            (Some(now), None) => {
                // A mean over few arrivals is too noisy to count the capacity at.
                let arrivals = demand.arrival_requests_per_s.stable * window_s;
                if let Some(output) = output.filter(|_| arrivals >= MIN_REFERENCE_ARRIVALS) {
                    self.mix_reference = Some((now, output));
                }
                1.0
            }
            (None, _) => 1.0,
        };
        Some(work::weigh(demand, weight))
    }

    fn stale_after_s(&self) -> f64 {
        STALE_AFTER_PERIODS * self.spec.period.as_secs_f64()
    }

    /// One period: folds `round` in, then decides on the windowed view (see
    /// [`ScalingLoop::tick_view`]).
    pub fn tick(&mut self, now: Clocks, round: &ScrapeRound, counts: ReplicaCounts) -> Tick {
        self.record(now.now_s, round);
        let view = self.view(now.now_s);
        self.tick_view(now, view, counts)
    }

    /// One period on a view computed elsewhere (a Prometheus server's): builds the
    /// observations, decides, records the period in the SLO history, and keeps the tick.
    pub fn tick_view(&mut self, now: Clocks, view: MetricsView, counts: ReplicaCounts) -> Tick {
        self.cold_starts.observe(now.now_s, counts);
        let mut observations = observations(counts, &view);
        observations.demand = self.weighed(view.demand.as_ref());
        self.rise_streak = 0;
        // The policy plans as far ahead as replicas have been measured to take.
        let lead_time_s = self.lead_time_s();
        let planning = PolicySpec {
            startup_time: std::time::Duration::from_secs_f64(lead_time_s),
            ..self.spec.clone()
        };
        self.policy.note_wall_clock(now);
        let decision = decide(&planning, &observations, &mut self.policy, now.now_s);
        let period = PeriodSample {
            ttft_p95_s: view.ttft_p95_s,
            tpot_p95_s: view.tpot_p95_s,
            output_tokens_per_s: view.demand.as_ref().map(|d| d.output_tokens_per_s.stable),
            // A CPU replica counts as one GPU.
            gpus: f64::from(counts.ready) * f64::from(self.spec.gpus_per_replica.max(1)),
        };
        self.slo.record(now.unix_s(), &self.spec.slo, period);
        let target_replicas = decision.replicas;
        super::journal::note(|| super::journal::Entry {
            now_s: now.now_s,
            desired_before: counts.desired,
            ready: counts.ready,
            target: target_replicas,
            reason: decision.reason,
            demand_tokens_per_s: decision.demand_tokens_per_s,
            capacity_tokens_per_s: decision.capacity_tokens_per_s_per_replica,
            queued_requests: view.demand.as_ref().map_or(0, |d| d.queued_requests),
            lead_time_s,
        });
        // Replicas this tick orders wait from now (see `ColdStarts::ordered`).
        self.cold_starts
            .ordered(now.now_s, target_replicas.saturating_sub(counts.desired));
        let tick = Tick {
            clocks: now,
            counts,
            observations,
            view,
            target_replicas,
            mark_for_removal: ready_to_mark(counts, target_replicas),
            marked_before: self.marked_for_removal.clone(),
            decision,
            attainment: self.slo.attainment(now.unix_s()),
            lead_time_s,
        };
        self.last = Some(tick.clone());
        tick
    }

    /// Records the removal marks in force after a tick was applied.
    pub fn note_marked(&mut self, marked: Vec<String>) {
        self.marked_for_removal = marked;
    }

    /// Replaces the last tick's target (the GPU budget's grant), so what is read back later
    /// is what was applied.
    pub fn note_applied(&mut self, tick: &Tick) {
        self.last = Some(tick.clone());
    }

    /// The last tick, if any.
    pub fn last(&self) -> Option<&Tick> {
        self.last.as_ref()
    }

    /// The policy's memory.
    pub fn policy(&self) -> &PolicyState {
        &self.policy
    }

    /// The policy's memory as status carries it, instants on `clocks`' wall clock.
    pub fn policy_snapshot(&self, clocks: Clocks) -> PolicySnapshot {
        snapshot(&self.policy, clocks)
    }

    /// The SLO record.
    pub fn slo(&self) -> &SloHistory {
        &self.slo
    }

    /// Replicas the last scale-in marked.
    pub fn marked_for_removal(&self) -> &[String] {
        &self.marked_for_removal
    }
}
