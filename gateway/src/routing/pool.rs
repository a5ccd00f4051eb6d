//! A model's pool: its replicas, the admission count and the queue of waiting requests.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::picker::{self, Candidate};
use super::replica::{Replica, ReplicaAddr, ReplicaLease, ReplicaState};
use crate::admission::{GatewayShare, QueueKey, WaitQueue};
use crate::error::GatewayError;
use crate::metrics::Arrival;
use crate::request::Priority;

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
}

#[derive(Debug, Default)]
struct PoolState {
    replicas: Vec<Arc<Replica>>,
    admitted: usize,
    /// Of `admitted`, requests of the `batch` class.
    admitted_batch: usize,
    queue: WaitQueue<oneshot::Sender<AdmissionPermit>>,
    seq: u64,
    cold_start: Option<ColdStart>,
}

/// What discovery knows of how long a model at zero replicas keeps its first requests
/// waiting: they are held for the cold start plus the TTFT SLO (scale from zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColdStart {
    /// Time to a first ready replica, when measured; `None`: the configured expectation.
    pub expected: Option<Duration>,
    /// The model's p95 time-to-first-token target.
    pub ttft_slo: Duration,
}

impl ColdStart {
    /// How long a request without its own deadline waits for a first replica.
    pub fn hold(&self, configured_cold_start: Duration) -> Duration {
        self.expected.unwrap_or(configured_cold_start) + self.ttft_slo
    }
}

/// A slot of a model's capacity, held by a tenant until the response ends.
#[derive(Debug)]
pub struct AdmissionPermit {
    pool: Arc<ModelPool>,
    tenant: Arc<str>,
    class: Priority,
    armed: bool,
}

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        if self.armed {
            let mut state = self.pool.lock();
            state.admitted -= 1;
            if self.class == Priority::Batch {
                state.admitted_batch -= 1;
            }
            state.queue.release(&self.tenant);
            self.pool.dispatch(&mut state);
        }
    }
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
        }
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
        self.dispatch(&mut state);
    }

    /// Records what discovery knows of the model's cold start (`None`: nothing).
    pub fn set_cold_start(&self, cold_start: Option<ColdStart>) {
        self.lock().cold_start = cold_start;
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
            admitted: state.admitted,
            queue_depth: state.queue.len(),
            queued_tokens: state.queue.queued_tokens(),
        }
    }

    /// How many more batch lines may start now: none while anyone waits (interactive
    /// requests go first), else up to `max_fill` of this pod's share of the ready replicas'
    /// slots minus those admitted; the rest stays free for interactive arrivals.
    pub fn batch_room(&self, max_fill: f64) -> usize {
        let state = self.lock();
        if !state.queue.is_empty() {
            return 0;
        }
        let capacity = self.capacity(&state);
        // At least one slot where there is any: a model with one slot would never run a
        // batch otherwise (the engine still schedules interactive work first).
        let fill = ((capacity as f64 * max_fill).floor() as usize).max(capacity.min(1));
        fill.saturating_sub(state.admitted)
    }

    /// This pod's share of the ready replicas' concurrency: with N gateway pods, engines
    /// see at most what they were sized for in total.
    fn capacity(&self, state: &PoolState) -> usize {
        let ready = state
            .replicas
            .iter()
            .filter(|r| r.state() == ReplicaState::Ready)
            .count();
        let total = ready as u64 * u64::from(self.settings.replica_concurrency);
        usize::try_from(self.share.of(total)).unwrap_or(usize::MAX)
    }

    /// Whether a request of `class` fits now. Batch work only takes slots nobody holds;
    /// interactive work does not count the slots batch work holds: the engines schedule
    /// interactive requests first and preempt batch ones for them, so a batch line never
    /// keeps an interactive request waiting here.
    fn has_room(&self, state: &PoolState, class: Priority) -> bool {
        let held = match class {
            Priority::Interactive => state.admitted - state.admitted_batch,
            Priority::Batch => state.admitted,
        };
        held < self.capacity(state)
    }

    /// Takes a slot for a request of `class`.
    fn take(
        self: &Arc<Self>,
        state: &mut PoolState,
        tenant: Arc<str>,
        class: Priority,
    ) -> AdmissionPermit {
        state.admitted += 1;
        if class == Priority::Batch {
            state.admitted_batch += 1;
        }
        state.queue.hold(&tenant);
        AdmissionPermit {
            pool: self.clone(),
            tenant,
            class,
            armed: true,
        }
    }

    /// Hands freed capacity to waiters in queue order.
    fn dispatch(self: &Arc<Self>, state: &mut PoolState) {
        while let Some(class) = state.queue.next_class() {
            if !self.has_room(state, class) {
                return;
            }
            let Some((key, waiter)) = state.queue.pop() else {
                return;
            };
            let permit = self.take(state, key.tenant, class);
            if let Err(mut permit) = waiter.send(permit) {
                // The waiter gave up (deadline, disconnect) just now: undo without re-locking.
                permit.armed = false;
                state.admitted -= 1;
                if class == Priority::Batch {
                    state.admitted_batch -= 1;
                }
                state.queue.release(&permit.tenant);
            }
        }
    }

    /// Waits for a slot for `tenant`: at once when a ready replica has room and nobody
    /// waits, else in the queue (see [`WaitQueue`] for its order) until `deadline`. 503 when
    /// the queue is full or the deadline passes. Dropping the future leaves the queue.
    /// `arrived` is told at once what became of the request on arrival (demand as offered).
    pub async fn admit(
        self: &Arc<Self>,
        priority: Priority,
        deadline: Instant,
        tokens: u64,
        tenant: &Arc<str>,
        arrived: impl FnOnce(Arrival),
    ) -> Result<AdmissionPermit, GatewayError> {
        let (key, receiver) = {
            let mut state = self.lock();
            // Nobody of this class or a higher one waits ahead of it.
            let first = state
                .queue
                .next_class()
                .is_none_or(|waiting| waiting > priority);
            if first && self.has_room(&state, priority) {
                arrived(Arrival::Admitted);
                return Ok(self.take(&mut state, tenant.clone(), priority));
            }
            if state.queue.len() >= self.settings.max_queue {
                arrived(Arrival::Refused);
                return Err(GatewayError::Overloaded {
                    message: format!("The queue for model `{}` is full; retry later.", self.name),
                    retry_after: Duration::from_secs(1),
                });
            }
            state.seq += 1;
            let key = QueueKey {
                priority,
                seq: state.seq,
                tenant: tenant.clone(),
            };
            let (sender, receiver) = oneshot::channel();
            state.queue.push(key.clone(), sender, tokens);
            arrived(Arrival::Queued);
            (key, receiver)
        };
        // A client that goes away while queued drops this future: leave the queue then too.
        let mut waiting = LeaveOnDrop {
            pool: self,
            key: Some(key),
        };
        match tokio::time::timeout_at(deadline.into(), receiver).await {
            Ok(Ok(permit)) => {
                waiting.key = None;
                Ok(permit)
            }
            Ok(Err(_)) | Err(_) => {
                drop(waiting);
                let ready = self
                    .snapshot()
                    .replicas
                    .iter()
                    .any(|r| r.state() == ReplicaState::Ready);
                let why = if ready {
                    "all replicas stayed busy"
                } else {
                    "no replica became ready"
                };
                Err(GatewayError::Overloaded {
                    message: format!(
                        "Model `{}`: {why} before the request's deadline.",
                        self.name
                    ),
                    retry_after: Duration::from_secs(if ready { 1 } else { 5 }),
                })
            }
        }
    }

    /// Picks a ready replica not in `exclude` and leases it for a request of `tokens`.
    pub fn pick(
        &self,
        prefix_hash: Option<u64>,
        tokens: u64,
        exclude: &[String],
    ) -> Option<ReplicaLease> {
        let state = self.lock();
        let ready: Vec<&Arc<Replica>> = state
            .replicas
            .iter()
            .filter(|r| r.state() == ReplicaState::Ready && !exclude.contains(&r.addr.url))
            .collect();
        let candidates: Vec<Candidate> = ready.iter().map(|r| self.candidate(r)).collect();
        let index = picker::pick(&candidates, prefix_hash, random_bits())?;
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
            // This pod's part of one replica's slots (rounded up: the pool caps the total).
            concurrency: self.per_replica_share(),
        }
    }
}

impl ModelPool {
    fn per_replica_share(&self) -> u32 {
        let (pods, _) = self.share.get();
        self.settings.replica_concurrency.div_ceil(pods.max(1))
    }
}

/// Takes a waiter out of the queue when its `admit` future ends without a permit, whether it
/// timed out or was dropped (the client went away): its place must not linger until its
/// deadline, holding queue room and counting as demand.
struct LeaveOnDrop<'a> {
    pool: &'a ModelPool,
    key: Option<QueueKey>,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.pool.lock().queue.remove(&key);
        }
    }
}

/// Cheap per-call random bits for the power-of-two-choices draw.
fn random_bits() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    picker::mix(nanos ^ COUNTER.fetch_add(0x9e37_79b9, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(concurrency: u32) -> Arc<ModelPool> {
        let settings = ModelSettings {
            replica_concurrency: concurrency,
            affinity_prefix_chars: 0,
            scrape_metrics: false,
            stale_after_ms: 1000,
            max_queue: 16,
        };
        let pool = Arc::new(ModelPool::new("m".into(), settings));
        let addr = ReplicaAddr::parse("http://127.0.0.1:9").expect("url");
        let (replica, _) = pool.add(addr);
        pool.set_replica_state(&replica, ReplicaState::Ready);
        pool
    }

    async fn admit(
        pool: &Arc<ModelPool>,
        class: Priority,
    ) -> Result<AdmissionPermit, GatewayError> {
        let deadline = Instant::now() + Duration::from_millis(50);
        pool.admit(class, deadline, 1, &Arc::from("t"), |_| {})
            .await
    }

    #[tokio::test]
    async fn batch_work_never_keeps_an_interactive_request_waiting() {
        let pool = pool(2);
        let batch = [
            admit(&pool, Priority::Batch).await.expect("a free slot"),
            admit(&pool, Priority::Batch).await.expect("a free slot"),
        ];
        // Both slots are batch work's: an interactive request still goes in (the engine
        // preempts batch work for it), a third batch request does not.
        let interactive = admit(&pool, Priority::Interactive)
            .await
            .expect("not blocked");
        assert!(admit(&pool, Priority::Batch).await.is_err());
        assert_eq!(pool.batch_room(1.0), 0);
        // Interactive requests do fill the slots for each other.
        let second = admit(&pool, Priority::Interactive)
            .await
            .expect("second slot");
        assert!(admit(&pool, Priority::Interactive).await.is_err());
        drop((batch, interactive, second));
        assert_eq!(pool.batch_room(1.0), 2);
        assert_eq!(pool.batch_room(0.5), 1);
    }
}
