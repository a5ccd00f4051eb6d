//! `EngineReading`: what one scrape of one replica says, in the same terms for every engine,
//! with every signal the engine did not export named as [`Absent`] (never a silent zero).

use std::fmt;

use super::kind::EngineKind;

/// The signals an adapter reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// Requests in the running batch (gauge).
    RunningRequests,
    /// Requests waiting to be scheduled (gauge).
    WaitingRequests,
    /// Share (0–1) of the KV cache in use (gauge).
    KvCacheUsage,
    /// Output tokens generated since start (counter).
    GeneratedTokens,
    /// Prompt tokens processed since start (counter).
    PromptTokens,
    /// Requests finished since start (counter).
    FinishedRequests,
    /// Time to first token (histogram, seconds).
    TimeToFirstToken,
    /// Time between output tokens (histogram, seconds).
    InterTokenLatency,
}

impl Signal {
    /// Every signal, in the order readings list them.
    pub const ALL: [Self; 8] = [
        Self::RunningRequests,
        Self::WaitingRequests,
        Self::KvCacheUsage,
        Self::GeneratedTokens,
        Self::PromptTokens,
        Self::FinishedRequests,
        Self::TimeToFirstToken,
        Self::InterTokenLatency,
    ];

    /// The signal in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::RunningRequests => "running requests",
            Self::WaitingRequests => "waiting requests",
            Self::KvCacheUsage => "KV-cache use",
            Self::GeneratedTokens => "generated tokens",
            Self::PromptTokens => "prompt tokens",
            Self::FinishedRequests => "finished requests",
            Self::TimeToFirstToken => "time-to-first-token histogram",
            Self::InterTokenLatency => "inter-token-latency histogram",
        }
    }
}

/// A signal the replica's scrape did not carry, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Absent {
    /// The engine that was read.
    pub kind: EngineKind,
    /// What is missing.
    pub signal: Signal,
    /// The names looked for, in order of preference (empty: the engine has no such metric).
    pub looked_for: &'static [&'static str],
    /// Why this engine may lack it, when that is known (e.g. removed in a release).
    pub note: Option<&'static str>,
}

impl fmt::Display for Absent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = self.kind.display_name();
        let what = self.signal.describe();
        match (self.looked_for, self.note) {
            ([], Some(note)) => write!(f, "{what}: {engine} exports none ({note})"),
            ([], None) => write!(f, "{what}: {engine} exports none"),
            (names, note) => {
                write!(
                    f,
                    "{what}: no {} in {engine}'s /metrics",
                    names.join(" or ")
                )?;
                match note {
                    Some(note) => write!(f, " ({note})"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// Cumulative histogram buckets `(upper_bound_s, count)` sorted by bound, `+Inf` last when
/// the engine exports it.
pub type Buckets = Vec<(f64, f64)>;

/// One replica's scrape through its engine's adapter. Gauges and counters are summed over
/// the replica's series (data-parallel engines, LoRA adapters), KV-cache use is the fullest
/// series, histograms are summed bucket by bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineReading {
    /// The engine read.
    pub kind: EngineKind,
    /// Requests in the running batch.
    pub running_requests: Result<f64, Absent>,
    /// Requests waiting to be scheduled.
    pub waiting_requests: Result<f64, Absent>,
    /// Share (0–1) of the KV cache in use.
    pub kv_cache_usage: Result<f64, Absent>,
    /// Output tokens generated since the engine started.
    pub generated_tokens: Result<f64, Absent>,
    /// Prompt tokens processed since the engine started.
    pub prompt_tokens: Result<f64, Absent>,
    /// Requests finished since the engine started.
    pub finished_requests: Result<f64, Absent>,
    /// Time-to-first-token histogram.
    pub time_to_first_token: Result<Buckets, Absent>,
    /// Inter-token-latency histogram.
    pub inter_token_latency: Result<Buckets, Absent>,
}

impl EngineReading {
    /// Every signal that is missing, in [`Signal::ALL`] order.
    pub fn absent(&self) -> Vec<&Absent> {
        [
            self.running_requests.as_ref().err(),
            self.waiting_requests.as_ref().err(),
            self.kv_cache_usage.as_ref().err(),
            self.generated_tokens.as_ref().err(),
            self.prompt_tokens.as_ref().err(),
            self.finished_requests.as_ref().err(),
            self.time_to_first_token.as_ref().err(),
            self.inter_token_latency.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// True when nothing the engine exports was found: the text is not this engine's
    /// `/metrics` (a wrong kind, or metrics turned off).
    pub fn is_empty(&self) -> bool {
        self.absent().len() == Signal::ALL.len()
    }
}
