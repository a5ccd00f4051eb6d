//! The local process pool: engine replicas as child processes behind the in-process
//! gateway, implementing the operator's `ScaleTarget` so the same policy code scales them.
//! Scale-in drains first: the gateway stops routing to the replica, its streams finish, then
//! it gets SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokenscale_gateway::Registry;
use tokenscale_operator::autoscaler::ReplicaLoad;
use tokenscale_operator::scale::{ReplicaCounts, ScaleError, ScaleTarget, least_loaded};
use tokio::process::Child;
use tokio::sync::Mutex;

use super::child::{free_port, spawn_engine, terminate};

/// One engine child.
#[derive(Debug)]
pub struct Replica {
    /// `replica-N`.
    pub name: String,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub child: Child,
    /// `/health` answered 200 and the gateway knows it.
    pub ready: bool,
}

#[derive(Debug, Default)]
struct State {
    replicas: Vec<Replica>,
    desired: u32,
    next_id: u32,
    /// Marked by `mark_for_removal`: the next scale-in removes it first.
    marked: Option<String>,
}

/// The pool of one model's replicas.
#[derive(Clone)]
pub struct ProcessPool {
    model: String,
    engine_bin: PathBuf,
    engine_args: Arc<Vec<String>>,
    registry: Registry,
    drain_timeout: Duration,
    state: Arc<Mutex<State>>,
    retiring: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    http: super::probe::Probe,
}

impl ProcessPool {
    /// A pool for `model`, engines started as `engine_bin serve ENGINE_ARGS`.
    pub fn new(
        model: String,
        engine_bin: PathBuf,
        engine_args: Vec<String>,
        registry: Registry,
        drain_timeout: Duration,
    ) -> Self {
        Self {
            model,
            engine_bin,
            engine_args: Arc::new(engine_args),
            registry,
            drain_timeout,
            state: Arc::default(),
            retiring: Arc::default(),
            http: super::probe::Probe::new(),
        }
    }

    /// Marks ready every started replica whose `/health` is 200 and registers it with the
    /// gateway; reaps children that exited on their own.
    pub async fn refresh(&self) {
        let mut state = self.state.lock().await;
        let mut exited = Vec::new();
        for replica in state.replicas.iter_mut() {
            if let Ok(Some(status)) = replica.child.try_wait() {
                tracing::warn!(replica = replica.name, %status, "replica exited");
                exited.push(replica.url.clone());
                continue;
            }
            if !replica.ready && self.http.healthy(&replica.url).await {
                if let Err(error) = self.registry.add(&self.model, &replica.url) {
                    tracing::warn!(%error, "registering a replica");
                    continue;
                }
                replica.ready = true;
            }
        }
        for url in &exited {
            self.registry.remove(&self.model, url);
        }
        state.replicas.retain(|r| !exited.contains(&r.url));
    }

    /// `(name, url)` of the ready replicas.
    pub async fn ready_urls(&self) -> Vec<(String, String)> {
        let state = self.state.lock().await;
        state
            .replicas
            .iter()
            .filter(|r| r.ready)
            .map(|r| (r.name.clone(), r.url.clone()))
            .collect()
    }

    fn start_one(&self, state: &mut State) -> Result<(), ScaleError> {
        let port = free_port().map_err(|e| scale_error("finding a free port", e))?;
        let child = spawn_engine(&self.engine_bin, &self.engine_args, port)
            .map_err(|e| scale_error("starting an engine", e))?;
        state.next_id += 1;
        let name = format!("replica-{}", state.next_id);
        tracing::info!(replica = name, port, "replica starting");
        state.replicas.push(Replica {
            name,
            url: format!("http://127.0.0.1:{port}"),
            child,
            ready: false,
        });
        Ok(())
    }

    /// Drains `replica` in the gateway, waits for its in-flight requests (bounded by the
    /// drain timeout), then SIGTERMs it and waits for it to exit.
    async fn retire(&self, mut replica: Replica) {
        self.registry.drain(&self.model, &replica.url);
        let deadline = Instant::now() + self.drain_timeout;
        while Instant::now() < deadline && self.http.in_flight(&replica.url).await > 0.0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.registry.remove(&self.model, &replica.url);
        terminate(&replica.child);
        if tokio::time::timeout(
            self.drain_timeout + Duration::from_secs(5),
            replica.child.wait(),
        )
        .await
        .is_err()
        {
            let _ = replica.child.kill().await;
        }
        tracing::info!(replica = replica.name, "replica stopped");
    }

    /// Drains and stops every replica, and waits for retirements already under way (Ctrl-C).
    pub async fn shutdown(&self) {
        let replicas: Vec<Replica> = std::mem::take(&mut self.state.lock().await.replicas);
        for replica in replicas {
            self.spawn_retire(replica).await;
        }
        let handles: Vec<_> = std::mem::take(&mut *self.retiring.lock().await);
        for handle in handles {
            let _ = handle.await;
        }
    }

    /// Retires `replica` in the background, remembered so `shutdown` can wait for it.
    async fn spawn_retire(&self, replica: Replica) {
        let pool = self.clone();
        let handle = tokio::spawn(async move { pool.retire(replica).await });
        let mut retiring = self.retiring.lock().await;
        retiring.retain(|h| !h.is_finished());
        retiring.push(handle);
    }
}

fn scale_error(action: &str, error: std::io::Error) -> ScaleError {
    ScaleError {
        action: action.into(),
        message: error.to_string(),
        source: Some(Box::new(error)),
    }
}

impl ScaleTarget for ProcessPool {
    async fn replicas(&self) -> Result<Option<ReplicaCounts>, ScaleError> {
        let state = self.state.lock().await;
        let current = state.replicas.len() as u32;
        let ready = state.replicas.iter().filter(|r| r.ready).count() as u32;
        Ok(Some(ReplicaCounts {
            desired: state.desired,
            current,
            ready,
        }))
    }

    async fn set_replicas(&self, replicas: u32) -> Result<(), ScaleError> {
        let mut retiring = Vec::new();
        {
            let mut state = self.state.lock().await;
            state.desired = replicas;
            while (state.replicas.len() as u32) < replicas {
                self.start_one(&mut state)?;
            }
            while (state.replicas.len() as u32) > replicas {
                // Not-ready ones first (they serve nothing), then the marked one, then the newest.
                let index = state
                    .replicas
                    .iter()
                    .position(|r| !r.ready)
                    .or_else(|| {
                        state
                            .marked
                            .as_ref()
                            .and_then(|m| state.replicas.iter().position(|r| &r.name == m))
                    })
                    .unwrap_or(state.replicas.len() - 1);
                let replica = state.replicas.remove(index);
                state.marked = None;
                retiring.push(replica);
            }
        }
        for replica in retiring {
            self.spawn_retire(replica).await;
        }
        Ok(())
    }

    async fn mark_for_removal(&self, loads: &[ReplicaLoad]) -> Result<Option<String>, ScaleError> {
        let picked = least_loaded(loads).map(|l| l.name.clone());
        self.state.lock().await.marked = picked.clone();
        Ok(picked)
    }
}
