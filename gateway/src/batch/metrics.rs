//! The `batch` class's metrics, apart from the interactive ones (batch lines are not in the
//! request counters, latency histograms or arrivals the autoscaler sizes interactive
//! capacity from; it reads the batch backlog below instead).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use tokenscale_common::metrics::{LABEL_MODEL_NAME as MODEL, gateway as names};

use super::types::BatchStatus;
use crate::metrics::render::{esc, family};

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
        family(
            out,
            names::BATCH_REQUESTS_TOTAL,
            "counter",
            "Batch API lines answered, by outcome: completed (2xx, output file) or failed (error file).",
        );
        for ((model, tenant), lines) in &inner.lines {
            for (outcome, n) in [("completed", lines.completed), ("failed", lines.failed)] {
                let _ = writeln!(
                    out,
                    "{}{{{MODEL}=\"{}\",{}=\"{}\",{}=\"{outcome}\"}} {n}",
                    names::BATCH_REQUESTS_TOTAL,
                    esc(model),
                    names::LABEL_TENANT,
                    esc(tenant),
                    names::LABEL_OUTCOME,
                );
            }
        }
        type Read = fn(&Lines) -> u64;
        let tokens: [(&str, &str, Read); 2] = [
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
        for (name, help, read) in tokens {
            family(out, name, "counter", help);
            for ((model, tenant), lines) in &inner.lines {
                let _ = writeln!(
                    out,
                    "{name}{{{MODEL}=\"{}\",{}=\"{}\"}} {}",
                    esc(model),
                    names::LABEL_TENANT,
                    esc(tenant),
                    read(lines)
                );
            }
        }
        family(
            out,
            names::BATCH_IN_FLIGHT_REQUESTS,
            "gauge",
            "Batch lines this gateway pod has in flight.",
        );
        for (model, n) in &inner.in_flight {
            let _ = writeln!(
                out,
                "{}{{{MODEL}=\"{}\"}} {n}",
                names::BATCH_IN_FLIGHT_REQUESTS,
                esc(model)
            );
        }
        family(
            out,
            names::BATCH_PACE_LIMIT,
            "gauge",
            "Batch lines this gateway pod lets run at once, paced by interactive latency.",
        );
        for (model, n) in &inner.pace {
            let _ = writeln!(
                out,
                "{}{{{MODEL}=\"{}\"}} {n}",
                names::BATCH_PACE_LIMIT,
                esc(model)
            );
        }
        family(
            out,
            names::BATCH_BACKLOG_OUTPUT_TOKENS,
            "gauge",
            "Output tokens the unanswered lines of running batches may still generate.",
        );
        for (model, (tokens, _)) in &inner.backlog {
            let _ = writeln!(
                out,
                "{}{{{MODEL}=\"{}\"}} {tokens}",
                names::BATCH_BACKLOG_OUTPUT_TOKENS,
                esc(model)
            );
        }
        family(
            out,
            names::BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND,
            "gauge",
            "Output tokens per second needed to finish every running batch by its deadline.",
        );
        for (model, (_, rate)) in &inner.backlog {
            let _ = writeln!(
                out,
                "{}{{{MODEL}=\"{}\"}} {rate}",
                names::BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND,
                esc(model)
            );
        }
        family(
            out,
            names::BATCHES,
            "gauge",
            "Unfinished Batch API jobs by status.",
        );
        for (status, n) in &inner.statuses {
            let _ = writeln!(
                out,
                "{}{{{}=\"{status}\"}} {n}",
                names::BATCHES,
                names::LABEL_STATUS
            );
        }
    }
}
