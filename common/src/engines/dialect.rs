//! `Dialect`: the metric names one engine exports for each [`Signal`], and the one reader
//! that turns samples into an [`EngineReading`] with them. Each engine's file is a table.

use super::kind::EngineKind;
use super::reading::{Absent, Buckets, EngineReading, Signal};

/// One parsed sample, borrowed from whichever parser read the text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleRef<'a> {
    /// Metric name as exposed (`vllm:num_requests_running`, `x_bucket`).
    pub name: &'a str,
    /// Labels in the order written.
    pub labels: &'a [(String, String)],
    /// The value.
    pub value: f64,
}

impl SampleRef<'_> {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The names of one signal: the first name present in a scrape is read, the others ignored
/// (an engine that exports a metric under both its old and new name counts it once).
pub type Names = &'static [&'static str];

/// How one engine names its metrics.
#[derive(Debug)]
pub struct Dialect {
    /// The engine.
    pub kind: EngineKind,
    /// Running-requests gauge.
    pub running: Names,
    /// Waiting-requests gauge.
    pub waiting: Names,
    /// KV-cache use gauge, 0–1.
    pub kv_cache_usage: Names,
    /// Generated-tokens counter (exposed name, `_total` included).
    pub generated_tokens: Names,
    /// Prompt-tokens counter.
    pub prompt_tokens: Names,
    /// Finished requests: a counter, or a histogram's `_count` series.
    pub finished_requests: Names,
    /// Time-to-first-token histogram (base name, without `_bucket`).
    pub time_to_first_token: Names,
    /// Inter-token-latency histogram (base name).
    pub inter_token_latency: Names,
    /// Which series count: engines that repeat a value per rank keep one rank.
    pub keep: fn(&SampleRef<'_>) -> bool,
    /// Why a signal may be missing from this engine's scrape, when that is known.
    pub note: fn(Signal) -> Option<&'static str>,
}

/// Every series counts.
pub fn keep_all(_: &SampleRef<'_>) -> bool {
    true
}

/// Nothing known.
pub fn no_note(_: Signal) -> Option<&'static str> {
    None
}

impl Dialect {
    /// Reads one replica's samples.
    pub fn read<'a>(&self, samples: impl IntoIterator<Item = SampleRef<'a>>) -> EngineReading {
        let kept: Vec<SampleRef<'a>> = samples.into_iter().filter(|s| (self.keep)(s)).collect();
        let absent = |signal: Signal, looked_for: Names| Absent {
            kind: self.kind,
            signal,
            looked_for,
            note: (self.note)(signal),
        };
        let sum = |signal, names: Names| {
            first_present(&kept, names, |n| n.to_string())
                .map(|name| finite(&kept, &name).sum())
                .ok_or_else(|| absent(signal, names))
        };
        let max = |signal, names: Names| {
            first_present(&kept, names, |n| n.to_string())
                .map(|name| finite(&kept, &name).fold(0.0, f64::max))
                .ok_or_else(|| absent(signal, names))
        };
        let histogram = |signal, names: Names| {
            first_present(&kept, names, |n| format!("{n}_bucket"))
                .map(|bucket_name| buckets(&kept, &bucket_name))
                .filter(|b| !b.is_empty())
                .ok_or_else(|| absent(signal, names))
        };
        EngineReading {
            kind: self.kind,
            running_requests: sum(Signal::RunningRequests, self.running),
            waiting_requests: sum(Signal::WaitingRequests, self.waiting),
            kv_cache_usage: max(Signal::KvCacheUsage, self.kv_cache_usage),
            generated_tokens: sum(Signal::GeneratedTokens, self.generated_tokens),
            prompt_tokens: sum(Signal::PromptTokens, self.prompt_tokens),
            finished_requests: sum(Signal::FinishedRequests, self.finished_requests),
            time_to_first_token: histogram(Signal::TimeToFirstToken, self.time_to_first_token),
            inter_token_latency: histogram(Signal::InterTokenLatency, self.inter_token_latency),
        }
    }
}

/// The finite values of the series named `name`.
fn finite<'s>(samples: &'s [SampleRef<'_>], name: &'s str) -> impl Iterator<Item = f64> + 's {
    samples
        .iter()
        .filter(move |s| s.name == name && s.value.is_finite())
        .map(|s| s.value)
}

/// The exposed name (made by `exposed` from the first of `names` that any sample carries).
fn first_present(
    samples: &[SampleRef<'_>],
    names: Names,
    exposed: impl Fn(&str) -> String,
) -> Option<String> {
    names.iter().map(|n| exposed(n)).find(|name| {
        samples
            .iter()
            .any(|s| s.name == name && s.value.is_finite())
    })
}

/// The `le` buckets of `bucket_name`, summed over series and sorted by bound; samples with a
/// missing or unreadable `le`, or a value that is not a finite count, are skipped.
fn buckets(samples: &[SampleRef<'_>], bucket_name: &str) -> Buckets {
    let mut out: Buckets = Vec::new();
    for sample in samples.iter().filter(|s| s.name == bucket_name) {
        let le = match sample.label("le") {
            Some("+Inf") => f64::INFINITY,
            Some(text) => match text.parse::<f64>() {
                Ok(le) if !le.is_nan() => le,
                _ => continue,
            },
            None => continue,
        };
        if !sample.value.is_finite() {
            continue;
        }
        match out.iter_mut().find(|(bound, _)| *bound == le) {
            Some((_, count)) => *count += sample.value,
            None => out.push((le, sample.value)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}
