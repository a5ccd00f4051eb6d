//! The policy's output: a replica count and why, in words a `kubectl describe` reader follows.

use std::fmt;

/// Why the policy chose what it chose; becomes the `Scaling` condition's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionReason {
    /// Demand fits the current replicas; nothing to do.
    Steady,
    /// Demand over the stable window needs more replicas.
    ScaleUp,
    /// A burst (panic window) needs at least `panic_threshold` × the ready replicas.
    PanicScaleUp,
    /// Interactive demand fits, but running batches need more than the capacity it leaves
    /// idle to finish by their deadlines.
    ScaleUpForBatch,
    /// Demand has been lower for the stabilisation window; one step down.
    ScaleDown,
    /// Would scale down, but the stabilisation window still remembers higher demand.
    Stabilizing,
    /// The model's history predicts a rise within the lead time: replicas ordered ahead of it.
    PreWarm,
    /// Would scale down, but the model's history predicts a rise before replicas let go
    /// now could be back.
    HoldPredictedRise,
    /// Would scale down, but a p95 is over (or too close to) the SLO.
    HoldSloNotMet,
    /// Would scale down, but still panicking after a burst.
    HoldPanic,
    /// Metrics missing or stale: hold, never scale down blind.
    HoldMissingMetrics,
    /// Scale-up already in flight: starting replicas cover the need.
    WaitingForPending,
    /// No demand for `scale_to_zero_after`: to zero.
    ScaleToZero,
    /// At zero with requests waiting: one replica at once.
    ScaleFromZero,
    /// The spec's min or max replicas bound the choice.
    Bounded,
}

impl DecisionReason {
    /// CamelCase name for Kubernetes conditions and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Steady => "Steady",
            Self::ScaleUp => "ScaleUp",
            Self::PanicScaleUp => "PanicScaleUp",
            Self::ScaleUpForBatch => "ScaleUpForBatch",
            Self::ScaleDown => "ScaleDown",
            Self::Stabilizing => "Stabilizing",
            Self::PreWarm => "PreWarm",
            Self::HoldPredictedRise => "HoldPredictedRise",
            Self::HoldSloNotMet => "HoldSLONotMet",
            Self::HoldPanic => "HoldPanic",
            Self::HoldMissingMetrics => "HoldMissingMetrics",
            Self::WaitingForPending => "WaitingForPending",
            Self::ScaleToZero => "ScaleToZero",
            Self::ScaleFromZero => "ScaleFromZero",
            Self::Bounded => "Bounded",
        }
    }
}

impl fmt::Display for DecisionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scaling decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Desired replicas, within `[min_replicas, max_replicas]`.
    pub replicas: u32,
    /// Machine-readable reason.
    pub reason: DecisionReason,
    /// The reason in words, with the numbers behind it (for status and events).
    pub message: String,
    /// Demand the decision planned for, output tokens/s (`None`: metrics missing).
    pub demand_tokens_per_s: Option<f64>,
    /// Learned capacity of one replica within the SLO, output tokens/s (`None`: not known yet).
    pub capacity_tokens_per_s_per_replica: Option<f64>,
    /// Whether the panic mode (burst) is on.
    pub panicking: bool,
}
