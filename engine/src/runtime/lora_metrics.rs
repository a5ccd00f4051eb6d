//! `vllm:lora_requests_info`, as vLLM exports it: one series whose labels name the adapters of
//! the running and the waiting requests (comma-separated) and `max_lora`, valued with the Unix
//! time of its last change. Exported only by a backend that computes adapters.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tokenscale_common::exposition::{Family, Kind, Series};
use tokenscale_common::metrics::engine as names;

/// The adapters in use, as the engine loop last published them.
#[derive(Debug, Default)]
pub struct LoraMetrics {
    state: Mutex<Option<State>>,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct State {
    max_lora: usize,
    running: String,
    waiting: String,
    changed_unix_s: f64,
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl LoraMetrics {
    /// Exports the series: the backend computes adapters, at most `max_lora` in memory.
    pub fn enable(&self, max_lora: usize) {
        *self.lock() = Some(State {
            max_lora,
            changed_unix_s: now_s(),
            ..State::default()
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<State>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The adapter names of the running and the waiting requests (each sorted, no repeats).
    pub fn set(&self, running: &[&str], waiting: &[&str]) {
        let mut guard = self.lock();
        let Some(state) = guard.as_mut() else {
            return;
        };
        let (running, waiting) = (running.join(","), waiting.join(","));
        if state.running != running || state.waiting != waiting {
            state.running = running;
            state.waiting = waiting;
            state.changed_unix_s = now_s();
        }
    }

    /// The family (none while disabled).
    pub(super) fn families(&self) -> Vec<Family<'static>> {
        let Some(s) = self.lock().clone() else {
            return Vec::new();
        };
        let labels = vec![
            ("running_lora_adapters", s.running),
            ("max_lora", s.max_lora.to_string()),
            ("waiting_lora_adapters", s.waiting),
        ];
        vec![Family::new(
            names::LORA_REQUESTS_INFO,
            Kind::Gauge,
            "Running and waiting LoRA adapters (labels) and when they last changed (value).",
            vec![Series::new(labels, s.changed_unix_s)],
        )]
    }
}
