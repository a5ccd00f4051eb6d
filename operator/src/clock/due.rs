//! The due-gate: a model decides once per period, when the operator's scaling clock (see
//! [`super::ticker`]) finds it due. A new generation, or a wake from the gateway's queue watch
//! (a first request at zero replicas), lets it decide at once; a failed decision is retried
//! after a backoff.

use std::time::Duration;

/// When one model last decided, and whether it may pass the gate once before its period.
/// Times are on the policy's clock, in seconds.
#[derive(Debug, Clone, Default)]
pub struct Due {
    /// `(decided_at_s, generation)` of the last decision.
    decided: Option<(f64, Option<i64>)>,
    /// Woken since the last pass through the gate.
    woken: bool,
    /// A failed decision's retry time: the gate stays shut until then (but for a wake).
    retry_at_s: Option<f64>,
}

impl Due {
    /// Time left before the model is due; `None` when due now: it never decided, its
    /// generation changed, a period has passed, or it was woken (this pass uses the wake up).
    /// After a failed decision, only its retry time or a wake opens the gate.
    pub fn not_due_for(
        &mut self,
        generation: Option<i64>,
        period_s: f64,
        now_s: f64,
    ) -> Option<Duration> {
        // Used up here, not at the decision: a wake that comes while a decision is running
        // (its metrics possibly read before the queue filled) still lets the next one through.
        if std::mem::take(&mut self.woken) {
            return None;
        }
        if let Some(retry_at_s) = self.retry_at_s {
            return (now_s < retry_at_s).then(|| Duration::from_secs_f64(retry_at_s - now_s));
        }
        let (decided_at_s, decided_generation) = self.decided?;
        let elapsed_s = now_s - decided_at_s;
        // 5% slack: a clock tick that comes a hair before the period must find the model due.
        let due = decided_generation != generation || elapsed_s >= 0.95 * period_s;
        (!due).then(|| Duration::from_secs_f64((period_s - elapsed_s).max(0.0)))
    }

    /// Records that the model, at `generation`, decided at `now_s`.
    pub fn mark_decided(&mut self, generation: Option<i64>, now_s: f64) {
        self.decided = Some((now_s, generation));
        self.retry_at_s = None;
    }

    /// Records that a decision failed at `now_s`: the next one is tried after `delay`.
    pub fn retry_after(&mut self, now_s: f64, delay: Duration) {
        self.retry_at_s = Some(now_s + delay.as_secs_f64());
    }

    /// Lets the model past the gate at its next look, however recently it decided.
    pub fn wake(&mut self) {
        self.woken = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD_S: f64 = 15.0;

    #[test]
    fn a_model_is_due_first_then_once_per_period_and_on_a_new_generation() {
        let mut gate = Due::default();
        assert_eq!(gate.not_due_for(Some(1), PERIOD_S, 0.0), None);
        gate.mark_decided(Some(1), 0.0);
        assert_eq!(
            gate.not_due_for(Some(1), PERIOD_S, 5.0),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            gate.not_due_for(Some(1), PERIOD_S, 14.5),
            None,
            "within the 5% slack"
        );
        assert_eq!(gate.not_due_for(Some(2), PERIOD_S, 5.0), None);
    }

    #[test]
    fn a_woken_model_passes_once_then_waits_for_its_period_again() {
        let (mut cold, mut other) = (Due::default(), Due::default());
        cold.mark_decided(Some(1), 0.0);
        other.mark_decided(Some(1), 0.0);
        cold.wake();
        assert_eq!(
            other.not_due_for(Some(1), PERIOD_S, 1.0),
            Some(Duration::from_secs(14)),
            "only the woken model passes"
        );
        assert_eq!(cold.not_due_for(Some(1), PERIOD_S, 1.0), None);
        cold.mark_decided(Some(1), 1.0);
        assert_eq!(
            cold.not_due_for(Some(1), PERIOD_S, 2.0),
            Some(Duration::from_secs(14)),
            "the wake is used up"
        );
    }

    #[test]
    fn a_wake_during_a_decision_survives_it() {
        let mut gate = Due::default();
        gate.mark_decided(Some(1), 0.0);
        // The clock's look passes the gate at 15 s, the queue fills while it decides.
        assert_eq!(gate.not_due_for(Some(1), PERIOD_S, 15.0), None);
        gate.wake();
        gate.mark_decided(Some(1), 15.5);
        assert_eq!(gate.not_due_for(Some(1), PERIOD_S, 15.6), None);
    }

    #[test]
    fn a_failed_decision_is_retried_after_its_backoff_or_a_wake() {
        let mut gate = Due::default();
        gate.retry_after(0.0, Duration::from_secs(5));
        assert_eq!(
            gate.not_due_for(Some(1), PERIOD_S, 1.0),
            Some(Duration::from_secs(4)),
            "not due although it never decided"
        );
        assert_eq!(gate.not_due_for(Some(1), PERIOD_S, 5.0), None);
        gate.wake();
        assert_eq!(gate.not_due_for(Some(1), PERIOD_S, 1.0), None, "woken");
        gate.mark_decided(Some(1), 6.0);
        assert_eq!(
            gate.not_due_for(Some(1), PERIOD_S, 7.0),
            Some(Duration::from_secs(14)),
            "a success ends the backoff"
        );
    }
}
