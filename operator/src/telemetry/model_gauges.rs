//! Per-model gauges (desired and ready replicas, GPUs held, SLO targets), labelled with the
//! served model name and namespace, set on every reconcile for the Grafana dashboard.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use kube::ResourceExt;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokenscale_common::metrics::{LABEL_MODEL_NAME, operator};

use crate::children::served_name;
use crate::controller::model_key;
use crate::crd::ModelDeployment;

type Labels = Vec<(String, String)>;

/// The prefix the operator's registry adds to every name.
const PREFIX: &str = "tokenscale_operator_";

/// What a reconcile saw of one model's replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFigures {
    /// Replicas the autoscaler asks for.
    pub desired_replicas: u32,
    /// Replicas passing readiness.
    pub ready_replicas: u32,
}

/// The per-model gauge families, and which labels each model was last exported under.
#[derive(Default)]
pub struct ModelGauges {
    desired: Family<Labels, Gauge>,
    ready: Family<Labels, Gauge>,
    gpus: Family<Labels, Gauge>,
    slo_ttft_s: Family<Labels, Gauge<f64, AtomicU64>>,
    slo_tpot_s: Family<Labels, Gauge<f64, AtomicU64>>,
    /// Labels per `namespace/name`: a changed `servedName` must drop the old series.
    exported: Mutex<HashMap<String, Labels>>,
}

/// `name` without the registry's prefix (the registry adds it back).
fn unprefixed(name: &'static str) -> &'static str {
    name.strip_prefix(PREFIX).unwrap_or(name)
}

impl ModelGauges {
    /// Registers the families in `registry`, which must carry the `tokenscale_operator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let families: [(&'static str, &str); 3] = [
            (
                operator::DESIRED_REPLICAS,
                "Replicas the autoscaler asks for",
            ),
            (
                operator::READY_REPLICAS,
                "Engine replicas passing readiness",
            ),
            (
                operator::GPUS,
                "nvidia.com/gpu held by ready engine replicas",
            ),
        ];
        for ((name, help), family) in
            families
                .into_iter()
                .zip([&self.desired, &self.ready, &self.gpus])
        {
            registry.register(unprefixed(name), help, family.clone());
        }
        registry.register(
            unprefixed(operator::SLO_TTFT_SECONDS),
            "p95 time-to-first-token SLO, seconds",
            self.slo_ttft_s.clone(),
        );
        registry.register(
            unprefixed(operator::SLO_TPOT_SECONDS),
            "p95 time-per-output-token SLO, seconds",
            self.slo_tpot_s.clone(),
        );
    }

    /// Sets every gauge of `md` from its spec and `figures`.
    pub fn set(&self, md: &ModelDeployment, figures: ModelFigures) {
        let labels = vec![
            (LABEL_MODEL_NAME.to_string(), served_name(md)),
            (
                operator::LABEL_NAMESPACE.to_string(),
                md.namespace().unwrap_or_default(),
            ),
        ];
        let previous =
            crate::controller::lock(&self.exported).insert(model_key(md), labels.clone());
        if let Some(old) = previous.filter(|old| *old != labels) {
            self.remove_labels(&old);
        }
        let gpus = u64::from(figures.ready_replicas) * u64::from(md.spec.engine.gpus_per_replica());
        self.desired
            .get_or_create(&labels)
            .set(i64::from(figures.desired_replicas));
        self.ready
            .get_or_create(&labels)
            .set(i64::from(figures.ready_replicas));
        self.gpus
            .get_or_create(&labels)
            .set(i64::try_from(gpus).unwrap_or(i64::MAX));
        self.slo_ttft_s
            .get_or_create(&labels)
            .set(md.spec.slo.ttft_p95.as_secs_f64());
        self.slo_tpot_s
            .get_or_create(&labels)
            .set(md.spec.slo.tpot_p95.as_secs_f64());
    }

    /// Drops every series of `md` (it was deleted).
    pub fn remove(&self, md: &ModelDeployment) {
        if let Some(labels) = crate::controller::lock(&self.exported).remove(&model_key(md)) {
            self.remove_labels(&labels);
        }
    }

    fn remove_labels(&self, labels: &Labels) {
        self.desired.remove(labels);
        self.ready.remove(labels);
        self.gpus.remove(labels);
        self.slo_ttft_s.remove(labels);
        self.slo_tpot_s.remove(labels);
    }
}
