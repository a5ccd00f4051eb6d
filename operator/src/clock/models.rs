//! The scaling clock's map of models: for each ModelDeployment (keyed `namespace/name`), its
//! scaling loop, its due-gate, the object its decisions act on, its decision failures and its
//! latest GPU request, which the cluster budget divides among all models. Only the clock
//! holds it; reconcile's messages ([`super::ClockMsg`]) change it.

use std::collections::HashMap;
use std::sync::Arc;

use super::due::Due;
use super::scaling::{policy_spec, restored_loop};
use super::{ClockMsg, WriteGuard};
use crate::autoscaler::Clocks;
use crate::budget::{GpuRequest, Grant, GrantReason, allocate};
use crate::controller::model_key;
use crate::crd::{ColdStartPhases, ModelDeployment};
use crate::metrics_source::ModelRef;
use crate::scaling::ScalingLoop;

/// What the operator keeps about one model between reconciles.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// The model's scaling loop (policy state, metrics windows, SLO record, marks).
    pub scaling: ScalingLoop,
    /// When it last decided, and whether the queue watch woke it.
    pub due: Due,
    /// The object as its last reconcile saw it, once that reconcile applied its children;
    /// `None` while its spec is invalid or its served name is taken (nothing to scale).
    pub object: Option<Arc<ModelDeployment>>,
    /// The model's write guard (see [`WriteGuard`]), from its last handover.
    pub guard: WriteGuard,
    /// Consecutive failed decisions, for the scaling clock's backoff.
    pub decision_failures: u32,
    /// Its latest GPU request and when it was made (policy clock, seconds).
    gpu_request: Option<(GpuRequest, f64)>,
    /// Where its metrics are, from its last reconcile (what the sampler scrapes).
    pub metrics: Option<ModelRef>,
    /// Whether its last decision saw a start pending (the next one lists pods once more).
    pub start_pending: bool,
    /// The phases of its most recent measured start (see [`super::start_phases`]).
    pub start_phases: Option<ColdStartPhases>,
    /// The pod of that start, whose own start-phase metrics split its `load`.
    pub start_pod: Option<String>,
}

impl ModelEntry {
    /// An entry around `scaling`, never decided.
    pub fn new(scaling: ScalingLoop) -> Self {
        Self {
            scaling,
            due: Due::default(),
            object: None,
            guard: WriteGuard::default(),
            decision_failures: 0,
            gpu_request: None,
            metrics: None,
            start_pending: false,
            start_phases: None,
            start_pod: None,
        }
    }
}

/// Every model this process knows.
#[derive(Debug, Default)]
pub struct Models {
    entries: HashMap<String, ModelEntry>,
}

impl Models {
    /// The entry of `md`; the first time this process sees the model (a new leader, a
    /// restart), its loop continues from what the last leader wrote into its status.
    pub fn entry(&mut self, md: &ModelDeployment, clocks: Clocks) -> &mut ModelEntry {
        self.entries.entry(model_key(md)).or_insert_with(|| {
            ModelEntry::new(restored_loop(
                policy_spec(&md.spec),
                md.status.as_ref(),
                clocks,
            ))
        })
    }

    /// Applies one message from reconcile.
    pub fn apply(&mut self, msg: ClockMsg) {
        match msg {
            ClockMsg::Handover(handover) => {
                let entry = self.entry(&handover.object, handover.at);
                entry.metrics = Some(handover.metrics);
                entry.object = Some(handover.object);
                entry.guard = handover.guard;
                // Every reconcile (a replica turning ready triggers one) times cold starts.
                if let Some(counts) = handover.counts {
                    entry.scaling.observe_counts(handover.at.now_s, counts);
                }
            }
            ClockMsg::Withdrawn { key } => {
                if let Some(entry) = self.entries.get_mut(&key) {
                    entry.object = None;
                }
            }
            ClockMsg::Removed { key } => self.forget(&key),
            ClockMsg::Woken { object, at } => self.entry(&object, at).due.wake(),
        }
    }

    /// The entry under `key`, if known.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut ModelEntry> {
        self.entries.get_mut(key)
    }

    /// Each model whose metrics location is known, with it (what the sampler scrapes).
    pub fn sampled(&self) -> Vec<(String, ModelRef)> {
        self.entries
            .iter()
            .filter_map(|(key, e)| Some((key.clone(), e.metrics.clone()?)))
            .collect()
    }

    /// The objects of the models due to decide at `now_s` (see [`Due::not_due_for`]); a
    /// wake is used up by this look.
    pub fn due(&mut self, now_s: f64) -> Vec<Arc<ModelDeployment>> {
        self.entries
            .values_mut()
            .filter_map(|entry| {
                let md = entry.object.as_ref()?;
                let period_s = md.spec.scaling.period.as_secs_f64();
                let due = entry
                    .due
                    .not_due_for(md.metadata.generation, period_s, now_s)
                    .is_none();
                due.then(|| md.clone())
            })
            .collect()
    }

    /// Replaces the entry under `key` (a test's prepared loop).
    pub fn insert(&mut self, key: String, entry: ModelEntry) {
        self.entries.insert(key, entry);
    }

    /// Forgets a deleted model: its loop, gate, failures and share of the budget.
    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Records `key`'s GPU `request` at `now_s` and returns its grant under `budget_gpus`,
    /// among the requests of every model made within `ttl_s` (a model not reconciled for
    /// longer no longer holds GPUs in the book).
    pub fn grant(
        &mut self,
        key: &str,
        budget_gpus: u64,
        request: GpuRequest,
        now_s: f64,
        ttl_s: f64,
    ) -> Grant {
        let model = request.model.clone();
        if let Some(entry) = self.entries.get_mut(key) {
            entry.gpu_request = Some((request, now_s));
        }
        let mut requests: Vec<GpuRequest> = self
            .entries
            .values()
            .filter_map(|e| e.gpu_request.as_ref())
            .filter(|(_, t)| now_s - *t <= ttl_s)
            .map(|(r, _)| r.clone())
            .collect();
        requests.sort_by(|a, b| a.model.cmp(&b.model));
        let grants = allocate(budget_gpus, &requests);
        let mine = grants.into_iter().find(|g| g.model == model);
        // `allocate` answers every request; the fallback only satisfies the type.
        mine.unwrap_or_else(|| Grant {
            model,
            replicas: 0,
            gpus: 0,
            reason: GrantReason::BudgetLimited,
            message: "no grant".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscaler::{PolicySpec, Slo};

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

    fn models(keys: &[&str]) -> Models {
        let spec = PolicySpec::new(
            1,
            4,
            Slo {
                ttft_p95_s: 0.5,
                tpot_p95_s: 0.05,
            },
        );
        let mut models = Models::default();
        for key in keys {
            let entry = ModelEntry::new(ScalingLoop::new(spec.clone()));
            models.insert((*key).to_string(), entry);
        }
        models
    }

    #[test]
    fn the_budget_grants_by_priority_and_forgets_stale_models() {
        let mut book = models(&["ns/low", "ns/high"]);
        let low = book.grant("ns/low", 4, request("ns/low", 0, 4), 0.0, 60.0);
        assert_eq!(low.replicas, 4, "alone it gets everything");
        let high = book.grant("ns/high", 4, request("ns/high", 10, 3), 1.0, 60.0);
        assert_eq!(high.replicas, 3);
        let low = book.grant("ns/low", 4, request("ns/low", 0, 4), 2.0, 60.0);
        assert_eq!((low.replicas, low.reason), (1, GrantReason::BudgetLimited));
        // "high" stops reporting: after the TTL it no longer holds GPUs.
        let low = book.grant("ns/low", 4, request("ns/low", 0, 4), 100.0, 60.0);
        assert_eq!((low.replicas, low.reason), (4, GrantReason::Granted));
    }

    #[test]
    fn a_deleted_model_gives_its_share_back_at_once() {
        let mut book = models(&["ns/a", "ns/b"]);
        book.grant("ns/a", 4, request("ns/a", 10, 4), 0.0, 60.0);
        let b = book.grant("ns/b", 4, request("ns/b", 0, 4), 1.0, 60.0);
        assert_eq!(b.replicas, 1, "the minimum while `a` holds the rest");
        book.forget("ns/a");
        let b = book.grant("ns/b", 4, request("ns/b", 0, 4), 2.0, 60.0);
        assert_eq!(b.replicas, 4);
    }
}
