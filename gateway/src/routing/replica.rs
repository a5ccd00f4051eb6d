//! One replica of a model: its address, state, and the load the gateway knows about it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use tokenscale_common::engines::EngineKind;

use super::adapters::{AdapterMemory, LoraInfo};
use super::adaptive::{Aimd, Sample, Slo};
use crate::vocab::{ReplicaAddr, Report};

/// Lifecycle of a replica as the gateway routes to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ReplicaState {
    /// Registered, not yet seen healthy: no work yet.
    Starting = 0,
    /// Healthy: receives work.
    Ready = 1,
    /// Failed a request or a probe: no work until a probe succeeds.
    Ejected = 2,
    /// Being taken away: no new work, in-flight requests finish.
    Draining = 3,
}

impl ReplicaState {
    fn from_u8(value: u8) -> Self {
        match value {
            1 => Self::Ready,
            2 => Self::Ejected,
            3 => Self::Draining,
            _ => Self::Starting,
        }
    }

    /// Label value on the replicas gauge.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Ejected => "ejected",
            Self::Draining => "draining",
        }
    }
}

/// A replica and its live counters; shared by the pool, leases and its health task.
#[derive(Debug)]
pub struct Replica {
    /// Where it is.
    pub addr: ReplicaAddr,
    /// Stable hash of the URL, for rendezvous hashing.
    pub key: u64,
    state: AtomicU8,
    in_flight_requests: AtomicU32,
    in_flight_tokens: AtomicU64,
    scraped_waiting_bits: AtomicU64,
    scraped_kv_bits: AtomicU64,
    /// Milliseconds after `epoch` of the last successful scrape; 0 = never.
    scraped_at_ms: AtomicU64,
    /// The engine it runs, as its metrics tell: 0 = not known yet, else 1 + the index in
    /// [`EngineKind::ALL`].
    engine: AtomicU8,
    epoch: Instant,
    /// The adaptive in-flight cap (see `adaptive`), for engines that do not hold an SLO
    /// themselves; `None`: the replica's concurrency alone bounds it.
    adaptive: Mutex<Option<Aimd>>,
    /// Its limit now, readable without the lock; 0 = no adaptive cap.
    cap: AtomicU32,
    /// The LoRA adapters it likely holds in memory.
    adapters: Mutex<AdapterMemory>,
}

impl Replica {
    /// A new replica in state `Starting`.
    pub fn new(addr: ReplicaAddr) -> Self {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        addr.url.hash(&mut hasher);
        Self {
            key: hasher.finish(),
            addr,
            state: AtomicU8::new(ReplicaState::Starting as u8),
            in_flight_requests: AtomicU32::new(0),
            in_flight_tokens: AtomicU64::new(0),
            scraped_waiting_bits: AtomicU64::new(0),
            scraped_kv_bits: AtomicU64::new(0),
            scraped_at_ms: AtomicU64::new(0),
            engine: AtomicU8::new(0),
            epoch: Instant::now(),
            adaptive: Mutex::new(None),
            cap: AtomicU32::new(0),
            adapters: Mutex::default(),
        }
    }

    /// Whether it likely holds the LoRA adapter `adapter` in memory (it was sent there, or
    /// its metrics named it, and fewer than its bound of other adapters came since).
    pub fn holds_adapter(&self, adapter: &str) -> bool {
        self.adapter_memory().holds(adapter)
    }

    /// A request for `adapter` was sent there: the engine loads it if it had not.
    pub(super) fn sent_adapter(&self, adapter: &str) {
        self.adapter_memory().touch(adapter);
    }

    /// Records what its `vllm:lora_requests_info` said.
    pub fn record_adapters(&self, info: &LoraInfo) {
        self.adapter_memory().scraped(info);
    }

    fn adapter_memory(&self) -> std::sync::MutexGuard<'_, AdapterMemory> {
        self.adapters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The adaptive cap on requests in flight through this gateway, when it has one.
    pub fn cap(&self) -> Option<u32> {
        Some(self.cap.load(Ordering::Relaxed)).filter(|&c| c > 0)
    }

    /// Caps it adaptively to hold `slo` under `ceiling`, or not at all (`None`); a limiter
    /// already holding the same SLO and ceiling keeps what it learned.
    pub(super) fn set_adaptive(&self, slo: Option<Slo>, ceiling: u32) {
        let mut adaptive = self.adaptive.lock().unwrap_or_else(|p| p.into_inner());
        let same = match (&*adaptive, slo) {
            (Some(aimd), Some(slo)) => aimd.holds(slo, ceiling),
            (None, None) => true,
            _ => false,
        };
        if !same {
            *adaptive = slo.map(|slo| Aimd::new(slo, ceiling));
        }
        let limit = adaptive.as_ref().map_or(0, Aimd::limit);
        self.cap.store(limit, Ordering::Relaxed);
    }

    /// Feeds the adaptive cap (nothing without one) the answer it gave to a request that
    /// was sent at `sent` and ended at `now`, as `report` tells it; returns whether the cap
    /// rose (waiters may go in).
    pub(super) fn served(&self, report: &Report, sent: Instant, now: Instant) -> bool {
        let mut adaptive = self.adaptive.lock().unwrap_or_else(|p| p.into_inner());
        let Some(aimd) = adaptive.as_mut() else {
            return false;
        };
        // Its own lease has ended: the requests beside it, and itself.
        let in_flight = self.in_flight_requests() + 1;
        let Some(limit) = sample(report, sent, now, in_flight).and_then(|s| aimd.record(s)) else {
            return false;
        };
        self.cap.swap(limit, Ordering::Relaxed) < limit
    }

    /// Current state.
    pub fn state(&self) -> ReplicaState {
        ReplicaState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Moves to `next` unless draining (draining is final); returns whether it changed.
    /// Only through [`super::ModelPool::set_replica_state`], which re-admits on a change.
    pub(super) fn set_state(&self, next: ReplicaState) -> bool {
        let mut current = self.state.load(Ordering::Acquire);
        loop {
            if current == ReplicaState::Draining as u8 || current == next as u8 {
                return false;
            }
            match self.state.compare_exchange(
                current,
                next as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Marks the replica draining: it gets no new work, ever.
    pub fn drain(&self) {
        self.state
            .store(ReplicaState::Draining as u8, Ordering::Release);
    }

    /// Requests in flight on it through this gateway.
    pub fn in_flight_requests(&self) -> u32 {
        self.in_flight_requests.load(Ordering::Relaxed)
    }

    /// Estimated tokens in flight on it through this gateway.
    pub fn in_flight_tokens(&self) -> u64 {
        self.in_flight_tokens.load(Ordering::Relaxed)
    }

    pub(crate) fn start_request(&self, tokens: u64) {
        self.in_flight_requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight_tokens.fetch_add(tokens, Ordering::Relaxed);
    }

    pub(crate) fn finish_request(&self, tokens: u64) {
        self.in_flight_requests.fetch_sub(1, Ordering::Relaxed);
        self.in_flight_tokens.fetch_sub(tokens, Ordering::Relaxed);
    }

    /// Records a scrape of the replica's own load.
    pub fn record_scrape(&self, waiting: f64, kv_usage: f64) {
        self.scraped_waiting_bits
            .store(waiting.to_bits(), Ordering::Relaxed);
        self.scraped_kv_bits
            .store(kv_usage.to_bits(), Ordering::Relaxed);
        let at = (self.epoch.elapsed().as_millis() as u64).max(1);
        self.scraped_at_ms.store(at, Ordering::Relaxed);
    }

    /// Records the engine the replica's metrics named.
    pub fn record_engine(&self, kind: EngineKind) {
        let index = EngineKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.engine.store(index as u8 + 1, Ordering::Relaxed);
    }

    /// The engine the replica runs, once a scrape of its metrics told (`None` before, or
    /// when metrics are not scraped): request fields only one engine reads are sent by it.
    pub fn engine(&self) -> Option<EngineKind> {
        let stored = self.engine.load(Ordering::Relaxed);
        let index = usize::from(stored).checked_sub(1)?;
        EngineKind::ALL.get(index).copied()
    }

    /// The last scraped `(waiting, kv_usage)`, or `None` when older than `stale_after_ms`.
    pub fn scraped_load(&self, stale_after_ms: u64) -> Option<(f64, f64)> {
        let at = self.scraped_at_ms.load(Ordering::Relaxed);
        let age_ms = (self.epoch.elapsed().as_millis() as u64).saturating_sub(at);
        (at != 0 && age_ms <= stale_after_ms).then(|| {
            let waiting = f64::from_bits(self.scraped_waiting_bits.load(Ordering::Relaxed));
            let kv = f64::from_bits(self.scraped_kv_bits.load(Ordering::Relaxed));
            (waiting, kv)
        })
    }
}

/// What an answer says of the replica's speed: `None` for one of fewer than two tokens or
/// without usage (failed).
fn sample(report: &Report, sent: Instant, now: Instant, in_flight: u32) -> Option<Sample> {
    let tokens = report.usage?.completion_tokens;
    if tokens < 2 {
        return None;
    }
    let (tpot, ttft) = match report.first_content {
        Some(first) => {
            let decode = now.saturating_duration_since(first).as_secs_f64();
            let ttft = first.saturating_duration_since(sent).as_secs_f64();
            (decode / (tokens - 1) as f64, Some(ttft))
        }
        // A whole answer: its time per token includes prefill, an upper bound.
        None => (
            now.saturating_duration_since(sent).as_secs_f64() / tokens as f64,
            None,
        ),
    };
    Some(Sample {
        tpot,
        ttft,
        in_flight,
    })
}

/// Holds one request's share of a replica's in-flight counters until dropped.
#[derive(Debug)]
pub struct ReplicaLease {
    /// The replica picked.
    pub replica: std::sync::Arc<Replica>,
    tokens: u64,
}

impl ReplicaLease {
    /// Counts a request of `tokens` on `replica`.
    pub fn new(replica: std::sync::Arc<Replica>, tokens: u64) -> Self {
        replica.start_request(tokens);
        Self { replica, tokens }
    }
}

impl Drop for ReplicaLease {
    fn drop(&mut self) {
        self.replica.finish_request(self.tokens);
    }
}
