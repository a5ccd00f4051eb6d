//! The local process pool: engine replicas as child processes behind the in-process
//! gateway, implementing the operator's `ScaleTarget` so the same policy code scales them.
//! Like a ReplicaSet it keeps its promise: a replica that exits, or stops answering its health
//! check, is replaced at once (with crash-loop backoff when it keeps failing), and says why.
//! Scale-in drains first: the gateway stops routing to the replica, its streams finish, then
//! it gets SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokenscale_gateway::Registry;
use tokenscale_gateway::routing::ColdStart;
use tokenscale_scaling::autoscaler::ReplicaLoad;
use tokenscale_scaling::scale::{
    ReplicaCounts, ScaleError, ScaleTarget, least_loaded, removal_plan,
};
use tokio::process::Child;
use tokio::sync::Mutex;

use super::child::{free_port, signal, spawn_engine, tail, terminate};
use super::crash_loop::{CrashLoop, Failure, STABLE_AFTER};

/// Failed health probes in a row before a ready replica counts as hung and is replaced.
const UNHEALTHY_AFTER: u32 = 3;
/// A replica not ready this long after its start is replaced.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(600);
/// Lines of a failed replica's output shown.
const TAIL_LINES: usize = 5;
/// A failure stays on the status line this long after the pool is whole again.
const SHOW_FAILURE_FOR: Duration = Duration::from_secs(60);

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
    started_at: Instant,
    ready_since: Option<Instant>,
    failed_probes: u32,
    log: PathBuf,
}

#[derive(Debug, Default)]
struct State {
    replicas: Vec<Replica>,
    desired: u32,
    next_id: u32,
    /// Marked by `mark_for_removal` / `mark_many_for_removal`, least loaded first: the next
    /// scale-in removes these first (after replicas that are not ready).
    marked: Vec<String>,
    crash_loop: CrashLoop,
    /// No replica starts before this (crash-loop backoff).
    next_start: Option<Instant>,
    last_failure: Option<(Failure, Instant)>,
}

/// The pool of one model's replicas.
#[derive(Clone)]
pub struct ProcessPool {
    model: String,
    engine_bin: PathBuf,
    engine_args: Arc<Vec<String>>,
    log_dir: PathBuf,
    registry: Registry,
    drain_timeout: Duration,
    state: Arc<Mutex<State>>,
    retiring: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    http: super::probe::Probe,
}

impl ProcessPool {
    /// Tells the gateway what a first replica costs: while none is ready, a request without
    /// its own deadline waits the measured cold start (until one is measured, the gateway's
    /// configured one) plus the TTFT SLO, not the interactive default.
    pub fn set_cold_start(&self, cold_start: ColdStart) {
        self.registry.set_cold_start(&self.model, Some(cold_start));
    }

    /// A pool for `model`, engines started as `engine_bin ENGINE_ARGS` on a port of their own,
    /// each writing its output to `log_dir/replica-N.log`.
    pub fn new(
        model: String,
        engine_bin: PathBuf,
        engine_args: Vec<String>,
        log_dir: PathBuf,
        registry: Registry,
        drain_timeout: Duration,
    ) -> Self {
        Self {
            model,
            engine_bin,
            engine_args: Arc::new(engine_args),
            log_dir,
            registry,
            drain_timeout,
            state: Arc::default(),
            retiring: Arc::default(),
            http: super::probe::Probe::new(),
        }
    }

    /// Reaps replicas that exited, probes the others' `/health` (registering the newly ready
    /// with the gateway, replacing the hung), then starts what the desired count lacks.
    pub async fn refresh(&self) {
        let targets: Vec<(String, String)> = {
            let mut state = self.state.lock().await;
            self.reap(&mut state);
            state
                .replicas
                .iter()
                .map(|r| (r.name.clone(), r.url.clone()))
                .collect()
        };
        // Probed without the lock: a hung replica's probe takes its whole timeout.
        let probes = targets.iter().map(|(_, url)| self.http.healthy(url));
        let healthy = futures::future::join_all(probes).await;
        let mut state = self.state.lock().await;
        for ((name, _), healthy) in targets.iter().zip(healthy) {
            self.apply_probe(&mut state, name, healthy);
        }
        self.start_missing(&mut state);
    }

    /// Removes every replica whose process has exited, reporting each.
    fn reap(&self, state: &mut State) {
        let mut index = 0;
        while index < state.replicas.len() {
            match state.replicas[index].child.try_wait() {
                Ok(Some(status)) => {
                    let replica = state.replicas.remove(index);
                    let what = match status.code() {
                        Some(_) => format!("exited with {status}"),
                        None => format!("was killed ({status})"),
                    };
                    self.failed(state, replica, what);
                }
                _ => index += 1,
            }
        }
    }

    /// Acts on one probe of replica `name`.
    fn apply_probe(&self, state: &mut State, name: &str, healthy: bool) {
        let Some(index) = state.replicas.iter().position(|r| r.name == name) else {
            return; // retired or reaped meanwhile
        };
        let replica = &mut state.replicas[index];
        let now = Instant::now();
        if healthy {
            replica.failed_probes = 0;
            if !replica.ready {
                if let Err(error) = self.registry.add(&self.model, &replica.url) {
                    tracing::warn!(%error, "registering a replica");
                    return;
                }
                replica.ready = true;
                replica.ready_since = Some(now);
            }
            if replica
                .ready_since
                .is_some_and(|since| now - since >= STABLE_AFTER)
            {
                state.crash_loop.stable();
            }
            return;
        }
        let hung = if replica.ready {
            replica.failed_probes += 1;
            (replica.failed_probes >= UNHEALTHY_AFTER).then(|| {
                format!(
                    "stopped answering /health ({UNHEALTHY_AFTER} probes in a row) and was killed"
                )
            })
        } else {
            (now - replica.started_at >= STARTUP_TIMEOUT).then(|| {
                format!(
                    "was not ready within {}s and was killed",
                    STARTUP_TIMEOUT.as_secs()
                )
            })
        };
        if let Some(what) = hung {
            let replica = state.replicas.remove(index);
            // SIGKILL: a hung process may not handle SIGTERM; `kill_on_drop` reaps it.
            signal(&replica.child, libc::SIGKILL);
            self.failed(state, replica, what);
        }
    }

    /// Forgets a failed replica, reports it, and sets when its replacement may start.
    fn failed(&self, state: &mut State, replica: Replica, what: String) {
        self.registry.remove(&self.model, &replica.url);
        let now = Instant::now();
        let ran_well = replica
            .ready_since
            .is_some_and(|since| now - since >= STABLE_AFTER);
        let retry_in = state
            .crash_loop
            .failed(replica.ready_since.is_some(), ran_well);
        state.next_start = Some(now + retry_in);
        let failure = Failure {
            replica: replica.name.clone(),
            what,
            after: now - replica.started_at,
            last_lines: tail(&replica.log, TAIL_LINES),
            log: replica.log.clone(),
            retry_in,
            in_a_row: state.crash_loop.in_a_row(),
        };
        eprintln!("{}", failure.log_line());
        tracing::warn!(
            replica = replica.name,
            failure = failure.status_note(),
            "replica failed"
        );
        state.last_failure = Some((failure, now));
    }

    /// Starts replicas until the desired count is reached, unless backing off.
    fn start_missing(&self, state: &mut State) {
        if state.next_start.is_some_and(|at| Instant::now() < at) {
            return;
        }
        while (state.replicas.len() as u32) < state.desired {
            if let Err(error) = self.start_one(state) {
                eprintln!("tokenscale up: {error}");
                state.next_start = Some(Instant::now() + Duration::from_secs(1));
                return;
            }
        }
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

    /// What the status line adds about failures: the last one while it matters (recent, or
    /// the pool short of its desired count), else nothing.
    pub async fn status_note(&self) -> String {
        let state = self.state.lock().await;
        let short = (state.replicas.len() as u32) < state.desired;
        match &state.last_failure {
            Some((failure, at)) if short || at.elapsed() < SHOW_FAILURE_FOR => {
                format!("  | {}", failure.status_note())
            }
            _ => String::new(),
        }
    }

    fn start_one(&self, state: &mut State) -> Result<(), ScaleError> {
        let port = free_port().map_err(|e| scale_error("finding a free port", e))?;
        let name = format!("replica-{}", state.next_id + 1);
        let log = self.log_dir.join(format!("{name}.log"));
        let child = spawn_engine(&self.engine_bin, &self.engine_args, port, &log)
            .map_err(|e| scale_error("starting an engine", e))?;
        state.next_id += 1;
        let url = format!("http://127.0.0.1:{port}");
        eprintln!(
            "tokenscale up: {name} starting on {url} (log: {})",
            log.display()
        );
        state.replicas.push(Replica {
            name,
            url,
            child,
            ready: false,
            started_at: Instant::now(),
            ready_since: None,
            failed_probes: 0,
            log,
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
        let replicas: Vec<Replica> = {
            let mut state = self.state.lock().await;
            state.desired = 0;
            std::mem::take(&mut state.replicas)
        };
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
            self.start_missing(&mut state);
            while (state.replicas.len() as u32) > replicas {
                let index = next_to_remove(
                    state.replicas.iter().map(|r| (r.name.as_str(), r.ready)),
                    &state.marked,
                );
                let replica = state.replicas.remove(index);
                state.marked.retain(|m| m != &replica.name);
                retiring.push(replica);
            }
            // Marks are for this scale-in: the next one picks from the loads it sees then.
            state.marked.clear();
        }
        for replica in retiring {
            self.spawn_retire(replica).await;
        }
        Ok(())
    }

    async fn mark_for_removal(&self, loads: &[ReplicaLoad]) -> Result<Option<String>, ScaleError> {
        let picked = least_loaded(loads).map(|l| l.name.clone());
        self.state.lock().await.marked = picked.iter().cloned().collect();
        Ok(picked)
    }

    async fn mark_many_for_removal(
        &self,
        loads: &[ReplicaLoad],
        count: u32,
        _marked_before: &[String],
    ) -> Result<Vec<String>, ScaleError> {
        // The pool's marks live in its memory and are replaced, so nothing stale is left to
        // clear.
        let mark = removal_plan(loads, count, &[]).mark;
        self.state.lock().await.marked = mark.clone();
        Ok(mark)
    }
}

/// Which replica a scale-in removes next, of `replicas` (name, ready) oldest first: one that
/// is not ready (it serves nothing), then the first marked one still here (least loaded),
/// then the newest.
fn next_to_remove<'a>(
    replicas: impl Iterator<Item = (&'a str, bool)> + Clone,
    marked: &[String],
) -> usize {
    let count = replicas.clone().count();
    replicas
        .clone()
        .position(|(_, ready)| !ready)
        .or_else(|| {
            marked
                .iter()
                .find_map(|m| replicas.clone().position(|(name, _)| name == m))
        })
        .unwrap_or(count.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::next_to_remove;

    #[test]
    fn a_scale_in_removes_unready_then_every_marked_replica_then_the_newest() {
        let names = ["a", "b", "c", "d"];
        let mut replicas: Vec<(&str, bool)> = names.iter().map(|n| (*n, true)).collect();
        replicas[3].1 = false;
        let mut marked = vec!["b".to_string(), "a".to_string()];
        let mut order = Vec::new();
        while !replicas.is_empty() {
            let i = next_to_remove(replicas.iter().copied(), &marked);
            let (name, _) = replicas.remove(i);
            marked.retain(|m| m != name);
            order.push(name);
        }
        assert_eq!(order, ["d", "b", "a", "c"]);
    }
}
