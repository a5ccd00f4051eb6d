//! The due-gate: a model decides once per period. Its own status write and its children's
//! changes trigger more reconciles, which only re-apply; a new generation, or a wake from the
//! gateway's queue watch (a first request at zero replicas), lets it decide at once.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// When each model last decided, and which models may pass the gate once before their period.
/// Models are keyed `namespace/name`; times are on the policy's clock, in seconds.
#[derive(Debug, Default)]
pub struct DueGate {
    /// `(decided_at_s, generation)` of each model's last decision.
    decided: HashMap<String, (f64, Option<i64>)>,
    /// Models woken since their last pass through the gate.
    woken: HashSet<String>,
}

impl DueGate {
    /// Time left before `model` is due; `None` when due now: it never decided, its generation
    /// changed, a period has passed, or it was woken (this pass uses the wake up).
    pub fn not_due_for(
        &mut self,
        model: &str,
        generation: Option<i64>,
        period_s: f64,
        now_s: f64,
    ) -> Option<Duration> {
        // Used up here, not at the decision: a wake that comes while a decision is running
        // (its metrics possibly read before the queue filled) still lets the next one through.
        if self.woken.remove(model) {
            return None;
        }
        let (decided_at_s, decided_generation) = *self.decided.get(model)?;
        let elapsed_s = now_s - decided_at_s;
        // 5% slack: a requeue after exactly one period must find the model due.
        let due = decided_generation != generation || elapsed_s >= 0.95 * period_s;
        (!due).then(|| Duration::from_secs_f64((period_s - elapsed_s).max(0.0)))
    }

    /// Records that `model`, at `generation`, decided at `now_s`.
    pub fn mark_decided(&mut self, model: &str, generation: Option<i64>, now_s: f64) {
        self.decided.insert(model.to_string(), (now_s, generation));
    }

    /// Lets `model` past the gate at its next reconcile, however recently it decided.
    pub fn wake(&mut self, model: &str) {
        self.woken.insert(model.to_string());
    }

    /// Forgets a deleted model.
    pub fn forget(&mut self, model: &str) {
        self.decided.remove(model);
        self.woken.remove(model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD_S: f64 = 15.0;

    #[test]
    fn a_model_is_due_first_then_once_per_period_and_on_a_new_generation() {
        let mut gate = DueGate::default();
        assert_eq!(gate.not_due_for("ns/m", Some(1), PERIOD_S, 0.0), None);
        gate.mark_decided("ns/m", Some(1), 0.0);
        assert_eq!(
            gate.not_due_for("ns/m", Some(1), PERIOD_S, 5.0),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            gate.not_due_for("ns/m", Some(1), PERIOD_S, 14.5),
            None,
            "within the 5% slack"
        );
        assert_eq!(gate.not_due_for("ns/m", Some(2), PERIOD_S, 5.0), None);
    }

    #[test]
    fn a_woken_model_passes_once_then_waits_for_its_period_again() {
        let mut gate = DueGate::default();
        gate.mark_decided("ns/cold", Some(1), 0.0);
        gate.mark_decided("ns/other", Some(1), 0.0);
        gate.wake("ns/cold");
        assert_eq!(
            gate.not_due_for("ns/other", Some(1), PERIOD_S, 1.0),
            Some(Duration::from_secs(14)),
            "only the woken model passes"
        );
        assert_eq!(gate.not_due_for("ns/cold", Some(1), PERIOD_S, 1.0), None);
        gate.mark_decided("ns/cold", Some(1), 1.0);
        assert_eq!(
            gate.not_due_for("ns/cold", Some(1), PERIOD_S, 2.0),
            Some(Duration::from_secs(14)),
            "the wake is used up"
        );
    }

    #[test]
    fn a_wake_during_a_decision_survives_it() {
        let mut gate = DueGate::default();
        gate.mark_decided("ns/cold", Some(1), 0.0);
        // The periodic reconcile passes the gate at 15 s, the queue fills while it decides.
        assert_eq!(gate.not_due_for("ns/cold", Some(1), PERIOD_S, 15.0), None);
        gate.wake("ns/cold");
        gate.mark_decided("ns/cold", Some(1), 15.5);
        assert_eq!(gate.not_due_for("ns/cold", Some(1), PERIOD_S, 15.6), None);
    }

    #[test]
    fn a_deleted_model_is_forgotten_wake_and_all() {
        let mut gate = DueGate::default();
        gate.mark_decided("ns/m", Some(1), 0.0);
        gate.wake("ns/m");
        gate.forget("ns/m");
        assert_eq!(
            gate.not_due_for("ns/m", Some(1), PERIOD_S, 1.0),
            None,
            "never decided"
        );
        gate.mark_decided("ns/m", Some(1), 1.0);
        assert!(
            gate.not_due_for("ns/m", Some(1), PERIOD_S, 2.0).is_some(),
            "no wake left over"
        );
    }
}
