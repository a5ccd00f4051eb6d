//! Request priority classes, shared by the gateway (admission order) and the engine
//! (scheduling and preemption order). Set by `x-tokenscale-priority` or the body's `priority`.

/// Priority class. `Interactive` work goes first; `Batch` work only uses the capacity
/// interactive work leaves, and is preempted first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// Someone is waiting on the answer (the default).
    #[default]
    Interactive,
    /// Offline work: throughput matters, latency does not.
    Batch,
}

impl Priority {
    /// Parses `interactive` / `batch` (case-insensitive, surrounding spaces ignored).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "interactive" => Some(Self::Interactive),
            "batch" => Some(Self::Batch),
            _ => None,
        }
    }

    /// The name used on the wire (`x-tokenscale-priority`) and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interactive => "interactive",
            Self::Batch => "batch",
        }
    }

    /// Dense index, for per-class queues (`Interactive` = 0).
    pub fn index(self) -> usize {
        match self {
            Self::Interactive => 0,
            Self::Batch => 1,
        }
    }
}
