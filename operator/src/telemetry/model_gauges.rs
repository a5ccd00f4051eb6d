//! Per-model gauges (desired and ready replicas, GPUs held, SLO targets), labelled with the
//! served model name and namespace, set on every reconcile for the Grafana dashboard.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kube::ResourceExt;
use tokenscale_common::exposition::{Family, Kind, Labels, Row, table};
use tokenscale_common::metrics::{LABEL_MODEL_NAME, operator};

use crate::children::served_name;
use crate::controller::model_key;
use crate::crd::ModelDeployment;

/// What a reconcile saw of one model's replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFigures {
    /// Replicas the autoscaler asks for.
    pub desired_replicas: u32,
    /// Replicas passing readiness.
    pub ready_replicas: u32,
}

/// One model's gauges as last set.
#[derive(Debug, Clone)]
struct Exported {
    served_name: String,
    namespace: String,
    figures: ModelFigures,
    gpus: u64,
    slo_ttft_s: f64,
    slo_tpot_s: f64,
}

/// Every model's gauges, by `namespace/name` (a changed `servedName` replaces its series).
#[derive(Default)]
pub struct ModelGauges {
    exported: Mutex<BTreeMap<String, Exported>>,
}

impl ModelGauges {
    /// Sets every gauge of `md` from its spec and `figures`.
    pub fn set(&self, md: &ModelDeployment, figures: ModelFigures) {
        let gpus = u64::from(figures.ready_replicas) * u64::from(md.spec.engine.gpus_per_replica());
        let exported = Exported {
            served_name: served_name(md),
            namespace: md.namespace().unwrap_or_default(),
            figures,
            gpus,
            slo_ttft_s: md.spec.slo.ttft_p95.as_secs_f64(),
            slo_tpot_s: md.spec.slo.tpot_p95.as_secs_f64(),
        };
        crate::controller::lock(&self.exported).insert(model_key(md), exported);
    }

    /// Drops every series of `md` (it was deleted).
    pub fn remove(&self, md: &ModelDeployment) {
        crate::controller::lock(&self.exported).remove(&model_key(md));
    }

    /// The five families, a series per model.
    pub fn families(&self) -> Vec<Family<'static>> {
        let exported = crate::controller::lock(&self.exported);
        let items: Vec<(Labels<'static>, &Exported)> = exported
            .values()
            .map(|e| {
                let labels = vec![
                    (LABEL_MODEL_NAME, e.served_name.clone()),
                    (operator::LABEL_NAMESPACE, e.namespace.clone()),
                ];
                (labels, e)
            })
            .collect();
        let mut families = table(Kind::Gauge, &COUNTS, &items);
        families.extend(table(Kind::Gauge, &SLOS, &items));
        families
    }
}

/// The replica and GPU gauges.
const COUNTS: [Row<'static, Exported, u64>; 3] = [
    (
        operator::DESIRED_REPLICAS,
        "Replicas the autoscaler asks for.",
        |e| u64::from(e.figures.desired_replicas),
    ),
    (
        operator::READY_REPLICAS,
        "Engine replicas passing readiness.",
        |e| u64::from(e.figures.ready_replicas),
    ),
    (
        operator::GPUS,
        "nvidia.com/gpu held by ready engine replicas.",
        |e| e.gpus,
    ),
];

/// The SLO targets, seconds.
const SLOS: [Row<'static, Exported, f64>; 2] = [
    (
        operator::SLO_TTFT_SECONDS,
        "p95 time-to-first-token SLO, seconds.",
        |e| e.slo_ttft_s,
    ),
    (
        operator::SLO_TPOT_SECONDS,
        "p95 time-per-output-token SLO, seconds.",
        |e| e.slo_tpot_s,
    ),
];
