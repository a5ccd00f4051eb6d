//! The status a decision writes, built by a pure function from what it saw and decided.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::autoscaler::{ConcurrencyCap, Decision, PolicySnapshot};
use crate::budget::{Grant, GrantReason};
use crate::crd::status::{SloAttainment, SloStatus};
use crate::crd::{
    CONDITION_READY, CONDITION_SCALING, CONDITION_SLO_MET, CapacityEstimate, ColdStartPhases,
    ConcurrencyCapStatus, Duration, LastDecision, ModelDeployment, ModelDeploymentStatus,
    ModelStatus, ObservedLoad,
};
use crate::metrics_source::MetricsView;
use crate::scale::ReplicaCounts;
use crate::scaling::attainment::SloHistory;

/// Everything the status is computed from.
pub struct StatusInput<'a> {
    /// The object (its generation and previous status).
    pub md: &'a ModelDeployment,
    /// Counts of the engine Deployment (`None` if it did not exist before this reconcile).
    pub counts: Option<ReplicaCounts>,
    /// Replicas asked for after the decision and the budget.
    pub desired: u32,
    /// The policy's decision.
    pub decision: &'a Decision,
    /// The budget's grant, when a budget is set.
    pub grant: Option<&'a Grant>,
    /// The metrics behind the decision.
    pub view: &'a MetricsView,
    /// The engine pods' label selector.
    pub selector: String,
    /// Now.
    pub now: Timestamp,
    /// What the operator remembers of the model, written so a new leader starts from it.
    pub memory: StatusMemory,
}

/// The parts of a model's memory that go into its status.
#[derive(Debug, Clone, Default)]
pub struct StatusMemory {
    /// The autoscaler's state.
    pub autoscaler: Option<PolicySnapshot>,
    /// The SLO record, this period included.
    pub slo: SloHistory,
    /// Pods marked for removal by the last scale-in.
    pub marked_for_removal: Vec<String>,
    /// The expected cold start, seconds (see `scaling::ColdStarts`).
    pub cold_start_s: Option<f64>,
    /// The measured cold starts kept, seconds, oldest first.
    pub cold_starts_s: Vec<f64>,
    /// The lead time the policy plans with, seconds.
    pub lead_time_s: Option<f64>,
    /// The phases of the most recent measured start, when this process saw one.
    pub start_phases: Option<ColdStartPhases>,
}

/// What the replicas serve: the commit they report; while none reports (scaled to zero,
/// metrics missing), the last one known for the same source.
fn model_status(
    md: &ModelDeployment,
    previous: &ModelDeploymentStatus,
    revisions: &[String],
) -> Option<ModelStatus> {
    let source = md.spec.model.source.clone();
    let kept = previous.model.clone().filter(|m| m.source == source);
    Some(match revisions {
        [] => kept.unwrap_or(ModelStatus {
            source,
            ..ModelStatus::default()
        }),
        [one] => ModelStatus {
            source,
            revision: Some(one.clone()),
            mixed_revisions: Vec::new(),
        },
        many => ModelStatus {
            source,
            revision: None,
            mixed_revisions: many.to_vec(),
        },
    })
}

/// A condition, keeping its last transition time when the status did not change.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" };
    tri_condition(previous, type_, status, reason, message, generation, now)
}

fn tri_condition(
    previous: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let last = previous.iter().find(|c| c.type_ == type_);
    let transition = match last {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now),
    };
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: transition,
    }
}

/// The full status for `input`.
pub fn build_status(input: &StatusInput<'_>) -> ModelDeploymentStatus {
    let md = input.md;
    let memory = &input.memory;
    let attainment = memory
        .slo
        .attainment(input.now.as_millisecond() as f64 / 1e3);
    let previous = md.status.clone().unwrap_or_default();
    // Until this process sees a start, the phases the last leader wrote stay.
    let start_phases = memory
        .start_phases
        .clone()
        .or_else(|| previous.cold_start_phases.clone());
    let generation = md.metadata.generation;
    let counts = input.counts.unwrap_or_default();
    let gpus = md.spec.engine.gpus_per_replica().max(1);
    let observed = input.view.demand.as_ref().map(|d| {
        let tokens_per_s = d.output_tokens_per_s.stable;
        let divisor = f64::from(counts.ready.max(1) * gpus);
        ObservedLoad {
            tokens_per_second: round2(tokens_per_s),
            tokens_per_second_per_gpu: round2(tokens_per_s / divisor),
            requests_per_second: round2(d.arrival_requests_per_s.stable),
            ttft_p95: input.view.ttft_p95_s.map(format_s),
            tpot_p95: input.view.tpot_p95_s.map(format_s),
            queue: d.queued_requests,
        }
    });
    let decision = input.decision;
    let desired = i32::try_from(input.desired).unwrap_or(i32::MAX);
    let last_decision = match &previous.last_decision {
        Some(last) if last.replicas == desired && last.reason == decision.reason.as_str() => {
            Some(last.clone())
        }
        _ => Some(LastDecision {
            replicas: desired,
            reason: decision.reason.as_str().into(),
            time: Time(input.now),
        }),
    };
    let conditions = vec![
        ready_condition(
            &previous.conditions,
            counts,
            input.desired,
            generation,
            input.now,
        ),
        scaling_condition(input, counts, generation),
        slo_condition(md, input.view, &previous.conditions, generation, input.now),
    ];
    ModelDeploymentStatus {
        replicas: i32::try_from(counts.current).unwrap_or(i32::MAX),
        ready_replicas: i32::try_from(counts.ready).unwrap_or(i32::MAX),
        desired_replicas: desired,
        selector: Some(input.selector.clone()),
        observed,
        capacity: decision
            .capacity_tokens_per_s_per_replica
            .map(|c| CapacityEstimate {
                tokens_per_second_per_replica: round2(c),
                source: if md.spec.scaling.initial_tokens_per_second_per_gpu.is_some() {
                    "hint+learned"
                } else {
                    "learned"
                }
                .into(),
            }),
        last_decision,
        conditions,
        observed_generation: generation,
        model: model_status(md, &previous, &input.view.revisions),
        slo: Some(SloStatus {
            attainment: SloAttainment {
                last_hour: attainment.last_hour.map(round4),
                last_24h: attainment.last_24h.map(round4),
            },
            history: memory.slo.clone(),
        }),
        goodput: attainment.goodput_tokens_per_s_per_gpu.map(round2),
        autoscaler: memory.autoscaler.clone(),
        marked_for_removal: memory.marked_for_removal.clone(),
        cold_start: memory.cold_start_s.map(duration),
        cold_starts: memory.cold_starts_s.iter().copied().map(duration).collect(),
        lead_time: memory.lead_time_s.map(duration),
        slowest_start_phase: start_phases.as_ref().and_then(super::start_phases::slowest),
        cold_start_phases: start_phases,
        concurrency_cap: input.view.concurrency_cap.map(cap_status),
    }
}

/// The replicas' concurrency cap as status shows it.
fn cap_status(cap: ConcurrencyCap) -> ConcurrencyCapStatus {
    ConcurrencyCapStatus {
        source: cap.source.as_str().into(),
        replicas: cap.replicas,
        per_replica: round2(cap.per_replica),
        in_use_per_replica: round2(cap.in_use_per_replica),
        at_cap: cap.at_cap,
    }
}

/// Seconds as a CRD duration.
fn duration(seconds: f64) -> crate::crd::Duration {
    crate::crd::Duration::from_std(std::time::Duration::from_secs_f64(seconds.max(0.0)))
}

fn ready_condition(
    previous: &[Condition],
    counts: ReplicaCounts,
    desired: u32,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let (status, reason, message) = if counts.ready > 0 {
        (
            true,
            "ReplicasReady",
            format!(
                "{} of {} replicas ready",
                counts.ready,
                desired.max(counts.current)
            ),
        )
    } else if desired == 0 {
        (
            true,
            "ScaledToZero",
            "scaled to zero; the first request starts a replica".to_string(),
        )
    } else {
        (
            false,
            "NoReplicaReady",
            format!("0 of {desired} replicas ready (starting or loading the model)"),
        )
    };
    condition(
        previous,
        CONDITION_READY,
        status,
        reason,
        message,
        generation,
        now,
    )
}

/// The `Scaling` condition's reason while a person's count holds (`spec.replicas.desired`).
pub const AUTOSCALING_PAUSED: &str = "AutoscalingPaused";

/// What the `Scaling` condition (and the Event of a held count's scale) says while `held`
/// replicas, a person's count, hold.
pub fn paused_message(md: &ModelDeployment, held: u32) -> String {
    format!(
        "autoscaling paused: replicas set to {held} by kubectl scale (spec.replicas.desired); \
         remove it to resume: kubectl patch md {} --type merge \
         -p '{{\"spec\":{{\"replicas\":{{\"desired\":null}}}}}}'",
        md.metadata.name.as_deref().unwrap_or_default()
    )
}

fn scaling_condition(
    input: &StatusInput<'_>,
    counts: ReplicaCounts,
    generation: Option<i64>,
) -> Condition {
    let previous = input
        .md
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if let Some(grant) = input
        .grant
        .filter(|g| g.reason == GrantReason::BudgetLimited)
    {
        return condition(
            previous,
            CONDITION_SCALING,
            true,
            "BudgetLimited",
            grant.message.clone(),
            generation,
            input.now,
        );
    }
    let moving = counts.desired != input.desired || counts.ready != input.desired;
    if let Some(held) = crate::controller::apply::held_replicas(input.md) {
        return condition(
            previous,
            CONDITION_SCALING,
            moving,
            AUTOSCALING_PAUSED,
            paused_message(input.md, held),
            generation,
            input.now,
        );
    }
    let reason = input.decision.reason.as_str();
    let mut message = input.decision.message.clone();
    if !input.view.missing.is_empty() {
        // Never a silent zero: say what the engines did not report.
        message = format!(
            "{message}; decided without {}",
            input.view.missing.join("; ")
        );
    }
    condition(
        previous,
        CONDITION_SCALING,
        moving,
        reason,
        message,
        generation,
        input.now,
    )
}

fn slo_condition(
    md: &ModelDeployment,
    view: &MetricsView,
    previous: &[Condition],
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let slo = &md.spec.slo;
    let (status, reason, message) = match (view.ttft_p95_s, view.tpot_p95_s) {
        (None, None) if view.demand.is_none() => (
            "Unknown",
            "MetricsMissing",
            "no metrics could be read".to_string(),
        ),
        (None, None) => (
            "Unknown",
            "NoTraffic",
            "no requests finished in the stable window".to_string(),
        ),
        (ttft, tpot) => {
            let over = |v: Option<f64>, target: &Duration| {
                v.map_or(0.0, |v| v / target.as_secs_f64().max(1e-9))
            };
            let ratio = over(ttft, &slo.ttft_p95).max(over(tpot, &slo.tpot_p95));
            let shown = |v: Option<f64>| v.map_or("n/a".to_string(), format_s);
            let message = format!(
                "p95 TTFT {} (SLO {}), p95 TPOT {} (SLO {})",
                shown(ttft),
                slo.ttft_p95,
                shown(tpot),
                slo.tpot_p95
            );
            if ratio <= 1.0 {
                ("True", "WithinSLO", message)
            } else {
                ("False", "SLOBroken", message)
            }
        }
    };
    tri_condition(
        previous,
        CONDITION_SLO_MET,
        status,
        reason,
        message,
        generation,
        now,
    )
}

fn format_s(seconds: f64) -> String {
    Duration::from_std(std::time::Duration::from_secs_f64(seconds.max(0.0))).to_string()
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Attainment to a hundredth of a percent (a minute of a day is 0.07%).
fn round4(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::test_support::md;

    const SPEC: &str = "  model: {source: \"hf://Qwen/Qwen3-8B\"}\n  replicas: {min: 1, max: 2}\n  \
                        slo: {ttftP95: 1s, tpotP95: 100ms}\n";

    #[test]
    fn the_model_status_reports_the_replicas_commit_and_keeps_it_while_none_reports() {
        let m = md(SPEC);
        let none = ModelDeploymentStatus::default();
        let one = model_status(&m, &none, &["abc".into()]).expect("status");
        assert_eq!(
            (one.source.as_str(), one.revision.as_deref()),
            ("hf://Qwen/Qwen3-8B", Some("abc"))
        );
        let previous = ModelDeploymentStatus {
            model: Some(one.clone()),
            ..Default::default()
        };
        assert_eq!(
            model_status(&m, &previous, &[]),
            Some(one),
            "scaled to zero: kept"
        );
        let mixed = model_status(&m, &previous, &["abc".into(), "def".into()]).expect("status");
        assert_eq!(
            (mixed.revision, mixed.mixed_revisions),
            (None, vec!["abc".into(), "def".into()])
        );
        let other = md(&SPEC.replace("Qwen3-8B", "Qwen3-4B"));
        let fresh = model_status(&other, &previous, &[]).expect("status");
        assert_eq!(
            fresh.revision, None,
            "a changed source forgets the old commit"
        );
    }

    #[test]
    fn status_shows_the_concurrency_cap_who_sets_it_and_how_many_replicas_run_at_it() {
        let cap = ConcurrencyCap {
            source: crate::autoscaler::CapSource::Gateway,
            replicas: 3,
            per_replica: 22.0 / 3.0,
            in_use_per_replica: 7.0,
            at_cap: 2,
        };
        let shown = serde_json::to_value(cap_status(cap)).unwrap_or_default();
        assert_eq!(
            shown,
            serde_json::json!({"source": "gateway", "replicas": 3, "perReplica": 7.33,
                               "inUsePerReplica": 7.0, "atCap": 2})
        );
    }
}
