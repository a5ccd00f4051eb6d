//! A model's pool: its replicas, and under the same lock its admission [`Slots`] (whose
//! rules live in `admission/`), so a change of capacity and its effect on waiters are one step.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use tokenscale_common::engines::{EngineKind, EnginePriority};

use super::adapters;
use super::adaptive::Slo;
use super::permit::{Waiter, dispatch};
use super::picker::{self, Candidate};
use super::replica::{Replica, ReplicaLease, ReplicaState};
use crate::admission::Slots;
use crate::vocab::{ColdStart, GatewayShare, ReplicaAddr, Report};

/// Per-model routing settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// Concurrent requests per replica before requests queue.
    pub replica_concurrency: u32,
    /// Leading prompt characters hashed for affinity (0 = off).
    pub affinity_prefix_chars: usize,
    /// Whether replicas' `/metrics` are scraped (else their load is never stale).
    pub scrape_metrics: bool,
    /// Scraped load older than this is stale (counts as full), in milliseconds.
    pub stale_after_ms: u64,
    /// Most waiting requests.
    pub max_queue: usize,
}

/// One served model.
#[derive(Debug)]
pub struct ModelPool {
    /// Served model name.
    pub name: String,
    /// Its settings.
    pub settings: ModelSettings,
    state: Mutex<PoolState>,
    /// This gateway pod's share of the replicas' concurrency.
    share: Arc<GatewayShare>,
    /// Whether its replicas are capped adaptively (read per answer without the lock).
    adaptive: AtomicBool,
    /// The LoRA adapters its replicas serve beside it, by name (apart from the state's lock:
    /// read by every request for a name that is not a model).
    adapters: RwLock<Vec<String>>,
    /// Adapter requests sent to a replica that held the adapter, and to one that did not.
    adapter_picks: [AtomicU64; 2],
}

#[derive(Debug, Default)]
struct PoolState {
    replicas: Vec<Arc<Replica>>,
    slots: Slots<Waiter>,
    cold_start: Option<ColdStart>,
    /// What its replicas run and how they take a request's class (tokenscale's engine and
    /// its header until discovery or the config say otherwise).
    engine: (EngineKind, EnginePriority),
    /// The SLO its replicas' adaptive caps hold: set only for engines that do not hold it
    /// themselves (see `adaptive`).
    adaptive_slo: Option<Slo>,
}

/// A snapshot of a pool for metrics and `/v1/models`.
#[derive(Debug, Clone)]
pub struct PoolSnapshot {
    /// The replicas.
    pub replicas: Vec<Arc<Replica>>,
    /// Requests admitted and not finished.
    pub admitted: usize,
    /// Requests waiting.
    pub queue_depth: usize,
    /// Their estimated tokens.
    pub queued_tokens: u64,
}

impl ModelPool {
    /// An empty pool, taking all of its replicas' concurrency.
    pub fn new(name: String, settings: ModelSettings) -> Self {
        Self {
            name,
            settings,
            state: Mutex::default(),
            share: Arc::default(),
            adaptive: AtomicBool::new(false),
            adapters: RwLock::default(),
            adapter_picks: Default::default(),
        }
    }

    /// Serves `names` as its LoRA adapters (replacing those before).
    pub fn set_adapters(&self, names: Vec<String>) {
        *self.adapters.write().unwrap_or_else(|p| p.into_inner()) = names;
    }

    /// The LoRA adapters its replicas serve, as declared.
    pub fn adapters(&self) -> Vec<String> {
        self.adapters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether `name` is one of its adapters.
    pub fn serves_adapter(&self, name: &str) -> bool {
        let adapters = self.adapters.read().unwrap_or_else(|p| p.into_inner());
        adapters.iter().any(|a| a == name)
    }

    /// Adapter requests sent so far to a replica that held the adapter (`hits`) and to one
    /// that did not (`misses`): `(hits, misses)`.
    pub fn adapter_picks(&self) -> (u64, u64) {
        let [hits, misses] = &self.adapter_picks;
        (hits.load(Ordering::Relaxed), misses.load(Ordering::Relaxed))
    }

    /// The pool taking `share` of its replicas' concurrency (gateway pods split it).
    pub fn with_share(self, share: Arc<GatewayShare>) -> Self {
        Self { share, ..self }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a replica (state `Starting` until its first good probe); returns it, or the
    /// existing one with that URL.
    pub fn add(&self, addr: ReplicaAddr) -> (Arc<Replica>, bool) {
        let mut state = self.lock();
        if let Some(existing) = state.replicas.iter().find(|r| r.addr.url == addr.url)
            && existing.state() != ReplicaState::Draining
        {
            return (existing.clone(), false);
        }
        let replica = Arc::new(Replica::new(addr));
        replica.set_adaptive(state.adaptive_slo, self.per_replica_share());
        state.replicas.push(replica.clone());
        (replica, true)
    }

    /// Stops new work to the replica at `url`; in-flight requests finish. Returns whether found.
    pub fn drain(&self, url: &str) -> bool {
        let state = self.lock();
        let found = state
            .replicas
            .iter()
            .filter(|r| r.addr.url == url)
            .map(|r| r.drain())
            .count();
        found > 0
    }

    /// Forgets the replica at `url` (draining it first); leases in flight keep it alive.
    pub fn remove(&self, url: &str) -> bool {
        let mut state = self.lock();
        let before = state.replicas.len();
        state.replicas.retain(|r| {
            let keep = r.addr.url != url;
            if !keep {
                r.drain();
            }
            keep
        });
        before != state.replicas.len()
    }

    /// Moves `replica` (one of this pool's) to `next`, and re-admits when that changed the
    /// capacity: a state change and its effect on waiters are one step, never two to keep
    /// together. Returns whether the state changed.
    pub fn set_replica_state(self: &Arc<Self>, replica: &Replica, next: ReplicaState) -> bool {
        let changed = replica.set_state(next);
        if changed {
            self.capacity_changed();
        }
        changed
    }

    /// Call after the capacity changed (gateway pods came or went): admits waiters if it grew.
    pub fn capacity_changed(self: &Arc<Self>) {
        let mut state = self.lock();
        self.apply_adaptive(&state);
        let capacity = self.capacity(&state);
        dispatch(self, &mut state.slots, capacity);
    }

    /// Caps each replica's requests in flight adaptively to hold `slo` (`None`: no cap).
    /// For engines that do not hold an SLO themselves; ours does (`serve --tpot-target`).
    pub fn set_adaptive_slo(self: &Arc<Self>, slo: Option<Slo>) {
        let changed = {
            let mut state = self.lock();
            self.adaptive.store(slo.is_some(), Ordering::Relaxed);
            std::mem::replace(&mut state.adaptive_slo, slo) != slo
        };
        if changed {
            self.capacity_changed();
        }
    }

    /// The SLO the replicas' adaptive caps hold, if any.
    pub fn adaptive_slo(&self) -> Option<Slo> {
        self.lock().adaptive_slo
    }

    /// The replica at `url` answered a request that arrived at `arrival`, as `report` tells
    /// (its queue wait left out): the replica's adaptive cap learns its TPOT and TTFT, and
    /// waiters go in when it rose.
    pub fn served(self: &Arc<Self>, url: &str, report: &Report, arrival: Instant) {
        if !self.adaptive.load(Ordering::Relaxed) {
            return;
        }
        let replica = self
            .lock()
            .replicas
            .iter()
            .find(|r| r.addr.url == url)
            .cloned();
        if let Some(replica) = replica {
            let sent = arrival + report.queue_wait.unwrap_or_default();
            if replica.served(report, sent, Instant::now()) {
                self.capacity_changed();
            }
        }
    }

    fn apply_adaptive(&self, state: &PoolState) {
        let ceiling = self.per_replica_share();
        for replica in &state.replicas {
            replica.set_adaptive(state.adaptive_slo, ceiling);
        }
    }

    /// Runs `f` on the admission slots and this pod's capacity now, under the pool's lock.
    pub(crate) fn with_slots<R>(&self, f: impl FnOnce(&mut Slots<Waiter>, usize) -> R) -> R {
        let mut state = self.lock();
        let capacity = self.capacity(&state);
        f(&mut state.slots, capacity)
    }

    /// Records what discovery knows of the model's cold start (`None`: nothing).
    pub fn set_cold_start(&self, cold_start: Option<ColdStart>) {
        self.lock().cold_start = cold_start;
    }

    /// Records the engine the model's replicas run and how they take a request's class; the
    /// admission count follows (batch-held slots count for interactive work where the engine
    /// does not preempt batch work).
    pub fn set_engine(self: &Arc<Self>, kind: EngineKind, priority: EnginePriority) {
        let mut state = self.lock();
        if state.engine == (kind, priority) {
            return;
        }
        state.engine = (kind, priority);
        state.slots.set_batch_preempted(priority.preempts_batch());
        let capacity = self.capacity(&state);
        dispatch(self, &mut state.slots, capacity);
    }

    /// The engine the model's replicas run and how they take a request's class.
    pub fn engine(&self) -> (EngineKind, EnginePriority) {
        self.lock().engine
    }

    /// The cold start to hold requests for, while the model has no ready replica; `None`
    /// when a replica is ready or discovery knows nothing of it.
    pub fn cold_start_while_empty(&self) -> Option<ColdStart> {
        let state = self.lock();
        let ready = state
            .replicas
            .iter()
            .any(|r| r.state() == ReplicaState::Ready);
        if ready { None } else { state.cold_start }
    }

    /// Snapshot for metrics and listings.
    pub fn snapshot(&self) -> PoolSnapshot {
        let state = self.lock();
        PoolSnapshot {
            replicas: state.replicas.clone(),
            admitted: state.slots.admitted(),
            queue_depth: state.slots.queue().len(),
            queued_tokens: state.slots.queue().queued_tokens(),
        }
    }

    /// How many more batch lines may start now (see [`Slots::batch_room`]).
    pub fn batch_room(&self, max_fill: f64) -> usize {
        self.with_slots(|slots, capacity| slots.batch_room(capacity, max_fill))
    }

    /// This pod's share of the ready replicas' concurrency: with N gateway pods, engines
    /// see at most what they were sized for in total; an adaptive cap lowers a replica's
    /// part, so requests over it wait in the queue (demand the autoscaler reads).
    fn capacity(&self, state: &PoolState) -> usize {
        let share = self.per_replica_share();
        let (mut ready, mut capped) = (0u64, 0u64);
        for replica in &state.replicas {
            if replica.state() == ReplicaState::Ready {
                ready += 1;
                capped += u64::from(replica.cap().map_or(share, |cap| cap.min(share)));
            }
        }
        let total = ready * u64::from(self.settings.replica_concurrency);
        usize::try_from(self.share.of(total).min(capped)).unwrap_or(usize::MAX)
    }

    /// Picks a ready replica not in `exclude` and leases it for a request of `tokens`; a
    /// request for one of its LoRA `adapter`s prefers a replica holding it (see
    /// [`adapters::pick`]).
    pub fn pick(
        &self,
        prefix_hash: Option<u64>,
        adapter: Option<&str>,
        tokens: u64,
        exclude: &[String],
    ) -> Option<ReplicaLease> {
        let state = self.lock();
        let ready: Vec<&Arc<Replica>> = state
            .replicas
            .iter()
            .filter(|r| r.state() == ReplicaState::Ready && !exclude.contains(&r.addr.url))
            .collect();
        // A replica at its adaptive cap counts as full while another has room.
        let open: Vec<&Arc<Replica>> = ready
            .iter()
            .copied()
            .filter(|r| r.cap().is_none_or(|cap| r.in_flight_requests() < cap))
            .collect();
        let ready = if open.is_empty() { ready } else { open };
        let candidates: Vec<Candidate> = ready.iter().map(|r| self.candidate(r)).collect();
        let Some(adapter) = adapter else {
            let index = picker::pick(&candidates, prefix_hash, random_bits())?;
            return Some(ReplicaLease::new(ready[index].clone(), tokens));
        };
        let held: Vec<bool> = ready.iter().map(|r| r.holds_adapter(adapter)).collect();
        let key = adapters::adapter_key(adapter);
        let index = adapters::pick(&candidates, &held, key, prefix_hash, random_bits())?;
        let miss = usize::from(!held[index]);
        self.adapter_picks[miss].fetch_add(1, Ordering::Relaxed);
        ready[index].sent_adapter(adapter);
        Some(ReplicaLease::new(ready[index].clone(), tokens))
    }

    fn candidate(&self, replica: &Replica) -> Candidate {
        let scraped = if self.settings.scrape_metrics {
            replica.scraped_load(self.settings.stale_after_ms)
        } else {
            Some((0.0, 0.0))
        };
        Candidate {
            key: replica.key,
            in_flight_requests: replica.in_flight_requests(),
            in_flight_tokens: replica.in_flight_tokens(),
            scraped,
            // This pod's part of one replica's slots (rounded up: the pool caps the total),
            // or its adaptive cap when lower.
            concurrency: replica.cap().map_or(self.per_replica_share(), |cap| {
                cap.min(self.per_replica_share())
            }),
        }
    }
}

impl ModelPool {
    fn per_replica_share(&self) -> u32 {
        let (pods, _) = self.share.get();
        self.settings.replica_concurrency.div_ceil(pods.max(1))
    }
}

/// Cheap per-call random bits for the power-of-two-choices draw.
fn random_bits() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    picker::mix(nanos ^ COUNTER.fetch_add(0x9e37_79b9, Ordering::Relaxed))
}
