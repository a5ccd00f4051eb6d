//! Glue between the CRD and the pure policy and budget: the spec as a `PolicySpec`, each
//! model's memory between periods, and the cluster budget book.

use std::collections::HashMap;

use crate::scaling::attainment::SloHistory;
use crate::autoscaler::{Clocks, PolicySpec, PolicyState, Slo, restore};
use crate::budget::{GpuRequest, Grant, allocate};
use crate::crd::{ModelDeploymentSpec, ModelDeploymentStatus};
use crate::metrics_source::ModelMetrics;

/// The policy's input from a (validated) spec.
pub fn policy_spec(spec: &ModelDeploymentSpec) -> PolicySpec {
    let slo = Slo {
        ttft_p95_s: spec.slo.ttft_p95.as_secs_f64(),
        tpot_p95_s: spec.slo.tpot_p95.as_secs_f64(),
    };
    let bound = |v: i32| u32::try_from(v).unwrap_or(0);
    let mut p = PolicySpec::new(bound(spec.replicas.min), bound(spec.replicas.max), slo);
    p.scale_to_zero_after = spec.replicas.scale_to_zero_after.as_ref().map(|d| d.get());
    p.target_utilization = spec.scaling.target_utilization;
    p.stable_window = spec.scaling.stable_window.get();
    p.panic_window = spec.scaling.panic_window.get();
    p.scale_down_stabilization = spec.scaling.scale_down_stabilization.get();
    p.scale_up_max_factor = spec.scaling.max_scale_up_rate;
    p.scale_down_max_fraction = spec.scaling.max_scale_down_rate;
    p.initial_tokens_per_s_per_gpu = spec.scaling.initial_tokens_per_second_per_gpu;
    // On CPU (no GPUs) capacity is per replica: count the replica as one "GPU".
    p.gpus_per_replica = spec.engine.gpus_per_replica().max(1);
    p.period = spec.scaling.period.get();
    p
}

/// What the operator remembers about one model between reconciles.
#[derive(Debug, Clone)]
pub struct ModelMemory {
    /// The policy's state (learned capacity, windows, panic).
    pub policy: PolicyState,
    /// Accumulated metrics.
    pub metrics: ModelMetrics,
    /// The SLO's minute-by-minute record.
    pub slo: SloHistory,
    /// Pods the last scale-in marked for removal.
    pub marked_for_removal: Vec<String>,
}

impl ModelMemory {
    /// Fresh memory for `spec`.
    pub fn new(spec: &PolicySpec) -> Self {
        Self {
            policy: PolicyState::new(spec),
            metrics: ModelMetrics::default(),
            slo: SloHistory::default(),
            marked_for_removal: Vec::new(),
        }
    }

    /// Memory for a model this process has not seen yet: what the last leader wrote into
    /// `status` (its autoscaler snapshot, SLO record and removal marks), else fresh. Metrics
    /// history is not carried over: the scrape rebuilds its windows within one stable window.
    pub fn restored(
        spec: &PolicySpec,
        status: Option<&ModelDeploymentStatus>,
        clocks: Clocks,
    ) -> Self {
        let mut memory = Self::new(spec);
        let Some(status) = status else {
            return memory;
        };
        if let Some(snapshot) = &status.autoscaler {
            memory.policy = restore(snapshot, clocks);
            // A snapshot from before the hint was set (or learned nothing) keeps the hint.
            if memory.policy.capacity_tokens_per_s_per_replica.is_none() {
                memory.policy.capacity_tokens_per_s_per_replica =
                    PolicyState::new(spec).capacity_tokens_per_s_per_replica;
            }
        }
        if let Some(slo) = &status.slo {
            memory.slo = slo.history.clone().repaired();
        }
        memory.marked_for_removal = status.marked_for_removal.clone();
        memory
    }
}

/// The latest GPU request of every model, for the cluster budget.
#[derive(Debug, Default)]
pub struct BudgetBook {
    requests: HashMap<String, (GpuRequest, f64)>,
}

impl BudgetBook {
    /// Records `request` at `now_s`, forgets requests older than `ttl_s` (models no longer
    /// reconciled), and returns this model's grant under `budget_gpus`.
    pub fn grant(
        &mut self,
        budget_gpus: u64,
        request: GpuRequest,
        now_s: f64,
        ttl_s: f64,
    ) -> Grant {
        let model = request.model.clone();
        self.requests.insert(model.clone(), (request, now_s));
        self.requests.retain(|_, (_, t)| now_s - *t <= ttl_s);
        let mut requests: Vec<GpuRequest> =
            self.requests.values().map(|(r, _)| r.clone()).collect();
        requests.sort_by(|a, b| a.model.cmp(&b.model));
        let grants = allocate(budget_gpus, &requests);
        let mine = grants.into_iter().find(|g| g.model == model);
        // `allocate` answers every request; the fallback only satisfies the type.
        mine.unwrap_or_else(|| Grant {
            model,
            replicas: 0,
            gpus: 0,
            reason: crate::budget::GrantReason::BudgetLimited,
            message: "no grant".into(),
        })
    }

    /// Forgets a deleted model.
    pub fn forget(&mut self, model: &str) {
        self.requests.remove(model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::GrantReason;

    fn request(model: &str, priority: i32, desired: u32) -> GpuRequest {
        GpuRequest {
            model: model.into(),
            priority,
            desired_replicas: desired,
            min_replicas: 1,
            gpus_per_replica: 1,
            slo_ratio: None,
        }
    }

    #[test]
    fn book_grants_by_priority_and_forgets_stale_models() {
        let mut book = BudgetBook::default();
        let low = book.grant(4, request("ns/low", 0, 4), 0.0, 60.0);
        assert_eq!(low.replicas, 4, "alone it gets everything");
        let high = book.grant(4, request("ns/high", 10, 3), 1.0, 60.0);
        assert_eq!(high.replicas, 3);
        let low = book.grant(4, request("ns/low", 0, 4), 2.0, 60.0);
        assert_eq!((low.replicas, low.reason), (1, GrantReason::BudgetLimited));
        // "high" stops reporting: after the TTL it no longer holds GPUs.
        let low = book.grant(4, request("ns/low", 0, 4), 100.0, 60.0);
        assert_eq!((low.replicas, low.reason), (4, GrantReason::Granted));
    }

    #[test]
    fn spec_maps_to_policy_numbers() {
        let spec: ModelDeploymentSpec = serde_json::from_value(serde_json::json!({
            "model": {"source": "smollm2-135m-instruct"},
            "engine": {"backend": "cpu"},
            "replicas": {"min": 0, "max": 3, "scaleToZeroAfter": "5m"},
            "slo": {"ttftP95": "500ms", "tpotP95": "50ms"},
            "scaling": {"initialTokensPerSecondPerGpu": 40.0}
        }))
        .expect("valid spec");
        let p = policy_spec(&spec);
        assert_eq!(
            (p.min_replicas, p.max_replicas, p.gpus_per_replica),
            (0, 3, 1)
        );
        assert_eq!(
            p.slo,
            Slo {
                ttft_p95_s: 0.5,
                tpot_p95_s: 0.05
            }
        );
        assert_eq!(
            p.scale_to_zero_after,
            Some(std::time::Duration::from_secs(300))
        );
        assert_eq!(p.initial_tokens_per_s_per_gpu, Some(40.0));
        assert!(p.validate().is_ok());
    }
}
