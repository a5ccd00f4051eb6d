//! `arrive`: a slot of a model's capacity, at once or after waiting in its queue, held as an
//! [`AdmissionPermit`] until the response ends; and `dispatch`, which hands freed slots on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{ModelPool, ReplicaState};
use crate::admission::{QueueKey, Slots};
use crate::error::GatewayError;
use crate::metrics::Arrival;
use crate::vocab::Priority;

/// How a queued request is told it was admitted.
pub type Waiter = oneshot::Sender<AdmissionPermit>;

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
            let pool = self.pool.clone();
            pool.with_slots(|slots, capacity| {
                slots.release(&self.tenant, self.class);
                dispatch(&pool, slots, capacity);
            });
        }
    }
}

/// Hands free capacity to waiters in queue order. The pool calls it, under its lock, when
/// its capacity grew (a replica became ready, gateway pods left).
pub fn dispatch(pool: &Arc<ModelPool>, slots: &mut Slots<Waiter>, capacity: usize) {
    while let Some((key, waiter)) = slots.next_admitted(capacity) {
        let permit = AdmissionPermit {
            pool: pool.clone(),
            tenant: key.tenant,
            class: key.priority,
            armed: true,
        };
        if let Err(mut permit) = waiter.send(permit) {
            // The waiter gave up (deadline, disconnect) just now: undo without re-locking.
            permit.armed = false;
            slots.release(&permit.tenant, permit.class);
        }
    }
}

/// A slot of `pool` for `tenant`, decided at once: the permit when a ready replica has room
/// and nobody waits, else a place in the queue (see
/// [`WaitQueue`](crate::admission::WaitQueue) for its order) to [`wait`](Queued::wait) on,
/// else 503 when the queue is full. `arrived` is told what became of the request (demand as
/// offered).
pub fn arrive(
    pool: &Arc<ModelPool>,
    priority: Priority,
    tokens: u64,
    tenant: &Arc<str>,
    arrived: impl FnOnce(Arrival),
) -> Result<Entry, GatewayError> {
    pool.with_slots(|slots, capacity| {
        if slots.admits_now(priority, capacity) {
            arrived(Arrival::Admitted);
            slots.take(tenant, priority);
            return Ok(Entry::Admitted(AdmissionPermit {
                pool: pool.clone(),
                tenant: tenant.clone(),
                class: priority,
                armed: true,
            }));
        }
        let (sender, receiver) = oneshot::channel();
        let max_queue = pool.settings.max_queue;
        let Some(key) = slots.enqueue(priority, tenant, sender, tokens, max_queue) else {
            arrived(Arrival::Refused);
            return Err(GatewayError::Overloaded {
                message: format!("The queue for model `{}` is full; retry later.", pool.name),
                retry_after: Duration::from_secs(1),
            });
        };
        arrived(Arrival::Queued);
        Ok(Entry::Queued(Queued { key, receiver }))
    })
}

/// A request's place in its model's queue.
pub struct Queued {
    key: QueueKey,
    receiver: oneshot::Receiver<AdmissionPermit>,
}

impl Queued {
    /// Waits for the permit until `deadline` (503 past it); dropping the future leaves the
    /// queue.
    pub async fn wait(
        self,
        pool: &Arc<ModelPool>,
        deadline: Instant,
    ) -> Result<AdmissionPermit, GatewayError> {
        let mut waiting = LeaveOnDrop {
            pool,
            key: Some(self.key),
        };
        match tokio::time::timeout_at(deadline.into(), self.receiver).await {
            Ok(Ok(permit)) => {
                waiting.key = None;
                Ok(permit)
            }
            Ok(Err(_)) | Err(_) => {
                drop(waiting);
                Err(gave_up(pool))
            }
        }
    }
}

/// What became of a request on arrival (a permit made under the lock leaves it before any
/// drop could take it again).
pub enum Entry {
    /// A slot now.
    Admitted(AdmissionPermit),
    /// A place in the queue.
    Queued(Queued),
}

/// The 503 of a request whose deadline passed in the queue, saying why it waited.
fn gave_up(pool: &ModelPool) -> GatewayError {
    let ready = pool
        .snapshot()
        .replicas
        .iter()
        .any(|r| r.state() == ReplicaState::Ready);
    let why = if ready {
        "all replicas stayed busy"
    } else {
        "no replica became ready"
    };
    GatewayError::Overloaded {
        message: format!(
            "Model `{}`: {why} before the request's deadline.",
            pool.name
        ),
        retry_after: Duration::from_secs(if ready { 1 } else { 5 }),
    }
}

/// Takes a waiter out of the queue when its `wait` future ends without a permit, whether it
/// timed out or was dropped (the client went away): its place must not linger until its
/// deadline, holding queue room and counting as demand.
struct LeaveOnDrop<'a> {
    pool: &'a ModelPool,
    key: Option<QueueKey>,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.pool.with_slots(|slots, _| slots.leave(&key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::{ModelSettings, ReplicaAddr};

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

    async fn take(pool: &Arc<ModelPool>, class: Priority) -> Result<AdmissionPermit, GatewayError> {
        let deadline = Instant::now() + Duration::from_millis(50);
        match arrive(pool, class, 1, &Arc::from("t"), |_| {})? {
            Entry::Admitted(permit) => Ok(permit),
            Entry::Queued(queued) => queued.wait(pool, deadline).await,
        }
    }

    #[tokio::test]
    async fn batch_work_never_keeps_an_interactive_request_waiting() {
        let pool = pool(2);
        let batch = [
            take(&pool, Priority::Batch).await.expect("a free slot"),
            take(&pool, Priority::Batch).await.expect("a free slot"),
        ];
        // Both slots are batch work's: an interactive request still goes in (the engine
        // preempts batch work for it), a third batch request does not.
        let interactive = take(&pool, Priority::Interactive)
            .await
            .expect("not blocked");
        assert!(take(&pool, Priority::Batch).await.is_err());
        assert_eq!(pool.batch_room(1.0), 0);
        // Interactive requests do fill the slots for each other.
        let second = take(&pool, Priority::Interactive)
            .await
            .expect("second slot");
        assert!(take(&pool, Priority::Interactive).await.is_err());
        drop((batch, interactive, second));
        assert_eq!(pool.batch_room(1.0), 2);
        assert_eq!(pool.batch_room(0.5), 1);
    }
}
