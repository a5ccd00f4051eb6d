//! The engine's own start by phase (process start → weights fetched → model loaded → warmed
//! up → serving), exported as `tokenscale_engine_start_phase_seconds{phase}` and logged once
//! the engine serves: the pod's conditions cannot tell fetching from loading or warming up,
//! so the operator reads this to split a replica's cold start.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use tokenscale_common::exposition::{Family, Kind, Series};
use tokenscale_common::metrics::{LABEL_MODEL_NAME, engine as names};

/// When this process started, as `main` marked it. Unmarked (a server started inside a test
/// process), a start counts from its own first phase instead: the process may have run
/// other servers before.
static PROCESS_START: OnceLock<Instant> = OnceLock::new();

/// Marks now as this process's start (the first call wins; `main` calls it first thing).
pub fn mark_process_start() {
    let _ = PROCESS_START.set(Instant::now());
}

/// One start in progress: each phase ends when [`StartClock::end`] names it.
#[derive(Debug, Clone)]
pub struct StartClock {
    last: Instant,
    phases: Vec<(&'static str, f64)>,
}

impl StartClock {
    /// A clock counting from the process's start (see [`mark_process_start`]).
    pub fn from_process_start() -> Self {
        Self {
            last: PROCESS_START.get().copied().unwrap_or_else(Instant::now),
            phases: Vec::new(),
        }
    }

    /// Ends `phase` now: it lasted since the previous phase ended.
    pub fn end(&mut self, phase: &'static str) {
        let now = Instant::now();
        let seconds = now.saturating_duration_since(self.last).as_secs_f64();
        self.phases.push((phase, seconds));
        self.last = now;
    }
}

/// The start as exported: pending until the engine serves, then each phase's seconds.
#[derive(Debug, Default)]
pub struct StartMetrics {
    state: Mutex<StartState>,
}

#[derive(Debug, Default)]
enum StartState {
    /// Not timed (a backend started by a test without a clock): nothing exported.
    #[default]
    Untimed,
    /// Loaded and warmed up; `ready` ends when the server installs the model.
    Pending(StartClock),
    /// Serving: the phases, in order.
    Done(Vec<(&'static str, f64)>),
}

impl StartMetrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, StartState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands over the clock of a start whose model is loaded and warmed up.
    pub fn begin(&self, clock: StartClock) {
        *self.lock() = StartState::Pending(clock);
    }

    /// The engine serves: ends `ready`, logs the phases and exports them. Once only; nothing
    /// for an untimed start.
    pub fn serving(&self) {
        let mut state = self.lock();
        let StartState::Pending(clock) = &mut *state else {
            return;
        };
        clock.end(names::START_PHASE_READY);
        let phases = std::mem::take(&mut clock.phases);
        let total: f64 = phases.iter().map(|(_, s)| s).sum();
        let split: Vec<String> = phases.iter().map(|(p, s)| format!("{p} {s:.3}s")).collect();
        tracing::info!(total_s = total, phases = %split.join(", "), "started");
        *state = StartState::Done(phases);
    }

    /// Sets the exported phases as they are (tests of the exposition).
    pub fn set(&self, phases: &[(&'static str, f64)]) {
        *self.lock() = StartState::Done(phases.to_vec());
    }

    /// The family (none before the engine serves).
    pub(super) fn families(&self, model_name: &str) -> Vec<Family<'static>> {
        let StartState::Done(phases) = &*self.lock() else {
            return Vec::new();
        };
        let series = phases
            .iter()
            .map(|(phase, seconds)| {
                let labels = vec![
                    (LABEL_MODEL_NAME, model_name.to_string()),
                    (names::LABEL_PHASE, (*phase).to_string()),
                ];
                Series::new(labels, *seconds)
            })
            .collect();
        vec![Family::new(
            names::START_PHASE_SECONDS,
            Kind::Gauge,
            "Seconds each phase of this engine's start took: fetch, load, warmup, ready.",
            series,
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phases_are_exported_in_order_once_the_engine_serves() {
        let metrics = StartMetrics::default();
        let mut clock = StartClock::from_process_start();
        for phase in [
            names::START_PHASE_FETCH,
            names::START_PHASE_LOAD,
            names::START_PHASE_WARMUP,
        ] {
            clock.end(phase);
        }
        metrics.begin(clock);
        assert!(metrics.families("m").is_empty(), "nothing before serving");
        metrics.serving();
        metrics.serving(); // a second call changes nothing
        let text = tokenscale_common::exposition::render(&metrics.families("m"));
        let phases: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split("phase=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(phases, names::START_PHASES);
    }

    #[test]
    fn an_untimed_start_exports_nothing() {
        let metrics = StartMetrics::default();
        metrics.serving();
        assert!(metrics.families("m").is_empty());
    }
}
