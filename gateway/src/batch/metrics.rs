//! The `batch` class's metrics, apart from the interactive ones (batch lines are not in the
//! request counters, latency histograms or arrivals the autoscaler sizes interactive
//! capacity from; it reads the batch backlog below instead).

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokenscale_common::exposition::{Family, Kind, Row, Series, Value, render, table};

use tokenscale_common::metrics::{LABEL_MODEL_NAME as MODEL, gateway as names};

use super::types::BatchStatus;
use crate::metrics::render::{counted, model};

/// Counters by (model, tenant), and gauges the runner sets.
#[derive(Debug, Default)]
pub struct BatchMetrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// (model, tenant) → counts.
    lines: BTreeMap<(String, String), Lines>,
    /// model → lines in flight on this pod.
    in_flight: BTreeMap<String, u64>,
    /// model → lines the pace allows.
    pace: BTreeMap<String, u32>,
    /// model → (backlog output tokens, required output tokens/s).
    backlog: BTreeMap<String, (u64, f64)>,
    /// Batches by status (shared state).
    statuses: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Lines {
    completed: u64,
    failed: u64,
    prompt_tokens: u64,
    generation_tokens: u64,
}

impl BatchMetrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A line answered.
    pub fn answered(&self, model: &str, tenant: &str, ok: bool, prompt: u64, generated: u64) {
        let mut inner = self.lock();
        let lines = inner
            .lines
            .entry((model.to_string(), tenant.to_string()))
            .or_default();
        if ok {
            lines.completed += 1;
        } else {
            lines.failed += 1;
        }
        lines.prompt_tokens += prompt;
        lines.generation_tokens += generated;
    }

    /// Lines in flight on this pod for `model` now.
    pub fn set_in_flight(&self, model: &str, lines: u64) {
        self.lock().in_flight.insert(model.to_string(), lines);
    }

    /// The pace's limit for `model` now.
    pub fn set_pace(&self, model: &str, limit: u32) {
        self.lock().pace.insert(model.to_string(), limit);
    }

    /// The backlog gauges, replaced whole (models with no running batch read 0).
    pub fn set_backlog(&self, backlog: BTreeMap<String, (u64, f64)>) {
        let mut inner = self.lock();
        for (model, value) in inner.backlog.iter_mut() {
            if !backlog.contains_key(model) {
                *value = (0, 0.0);
            }
        }
        inner.backlog.extend(backlog);
    }

    /// Unfinished batches by status, replaced whole.
    pub fn set_statuses(&self, counts: impl IntoIterator<Item = (BatchStatus, u64)>) {
        let mut inner = self.lock();
        // Unfinished statuses only: finished batches are kept forever and counting them
        // would cost a scan of every batch a few times a second.
        inner.statuses = BatchStatus::ALL
            .iter()
            .filter(|s| !s.is_terminal())
            .map(|s| (s.as_str(), 0))
            .collect();
        for (status, n) in counts {
            *inner.statuses.entry(status.as_str()).or_default() += n;
        }
    }

    /// Appends the families to a `/metrics` exposition.
    pub fn render(&self, out: &mut String) {
        let inner = self.lock();
        let mut families = vec![counted(
            names::BATCH_REQUESTS_TOTAL,
            "Batch API lines answered, by outcome: completed (2xx, output file) or failed (error file).",
            &outcomes(&inner.lines),
            |(model, tenant, outcome)| {
                let outcome = (names::LABEL_OUTCOME, outcome.to_string());
                vec![
                    (MODEL, model.clone()),
                    (names::LABEL_TENANT, tenant.clone()),
                    outcome,
                ]
            },
        )];
        let items: Vec<_> = inner
            .lines
            .iter()
            .map(|((model, tenant), lines)| {
                let labels = vec![
                    (MODEL, model.clone()),
                    (names::LABEL_TENANT, tenant.clone()),
                ];
                (labels, lines)
            })
            .collect();
        families.extend(table(Kind::Counter, &TOKENS, &items));
        families.extend(gauges(&inner));
        let statuses = inner
            .statuses
            .iter()
            .map(|(status, &n)| Series::new(vec![(names::LABEL_STATUS, status.to_string())], n));
        let help = "Unfinished Batch API jobs by status.";
        families.push(Family::new(
            names::BATCHES,
            Kind::Gauge,
            help,
            statuses.collect(),
        ));
        out.push_str(&render(&families));
    }
}

/// The per-model gauges: lines in flight, the pace, the backlog and the rate it needs.
fn gauges(inner: &Inner) -> [Family<'static>; 4] {
    let per_model = |name, help, values: Vec<(&String, Value)>| {
        let series = values.into_iter().map(|(m, v)| Series::new(model(m), v));
        Family::new(name, Kind::Gauge, help, series.collect())
    };
    let in_flight = inner
        .in_flight
        .iter()
        .map(|(m, &n)| (m, n.into()))
        .collect();
    let pace = inner
        .pace
        .iter()
        .map(|(m, &n)| (m, u64::from(n).into()))
        .collect();
    let backlog = inner
        .backlog
        .iter()
        .map(|(m, &(t, _))| (m, t.into()))
        .collect();
    let rate = inner
        .backlog
        .iter()
        .map(|(m, &(_, r))| (m, r.into()))
        .collect();
    [
        per_model(
            names::BATCH_IN_FLIGHT_REQUESTS,
            "Batch lines this gateway pod has in flight.",
            in_flight,
        ),
        per_model(
            names::BATCH_PACE_LIMIT,
            "Batch lines this gateway pod lets run at once, paced by interactive latency.",
            pace,
        ),
        per_model(
            names::BATCH_BACKLOG_OUTPUT_TOKENS,
            "Output tokens the unanswered lines of running batches may still generate.",
            backlog,
        ),
        per_model(
            names::BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND,
            "Output tokens per second needed to finish every running batch by its deadline.",
            rate,
        ),
    ]
}

/// Lines answered by (model, tenant, outcome).
fn outcomes(
    lines: &BTreeMap<(String, String), Lines>,
) -> BTreeMap<(String, String, &'static str), u64> {
    let mut counts = BTreeMap::new();
    for ((model, tenant), l) in lines {
        for (outcome, n) in [("completed", l.completed), ("failed", l.failed)] {
            counts.insert((model.clone(), tenant.clone(), outcome), n);
        }
    }
    counts
}

/// The token counters: name, help, count.
const TOKENS: [Row<'static, Lines, u64>; 2] = [
    (
        names::BATCH_PROMPT_TOKENS_TOTAL,
        "Prompt tokens of batch lines answered (engines' usage).",
        |l| l.prompt_tokens,
    ),
    (
        names::BATCH_GENERATION_TOKENS_TOTAL,
        "Completion tokens of batch lines answered (engines' usage).",
        |l| l.generation_tokens,
    ),
];
