//! The `ModelDeployment` controller: `Context`, the `reconcile` and `error_policy` functions
//! the kube-runtime `Controller` calls, and `run`, which wires them to the API server. The
//! decisions are not made here but on the scaling clock ([`crate::clock`]), which reconcile
//! tells what changed ([`ClockMsg`]).

pub mod apply;
pub mod conflict;
pub mod fill;
pub mod reconciles;
pub mod scope;
pub mod watches;

/// The clock's parts at the paths they had when they lived here.
pub use crate::clock::{scaling, status, ticker, wake};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use crate::clock::{Clock, ClockMsg};
use crate::crd::ModelDeployment;
use crate::error::{Error, Result};
use crate::metrics_source::MetricsSource;
use crate::telemetry::Metrics;
use reconciles::Reconciles;
pub use scope::{WatchScope, check_access};

/// Settings of the controller that come from the command line.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// GPUs all models together may use; `None`: no budget.
    pub gpu_budget: Option<u64>,
    /// Peers allowed to reach engine pods; `Some`: every ModelDeployment gets a
    /// NetworkPolicy admitting only them (see `children::network_policy`).
    pub engine_ingress_from: Option<Vec<k8s_openapi::api::networking::v1::NetworkPolicyPeer>>,
    /// Which namespaces may claim which served names (`--served-names`); empty: first come,
    /// first served.
    pub served_names: tokenscale_common::served_name::ServedNames,
}

/// Shared state of every reconcile.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Publishes Kubernetes Events.
    pub recorder: Recorder,
    /// The operator's own metrics.
    pub metrics: Arc<Metrics>,
    /// Where demand and latency come from.
    pub metrics_source: Arc<dyn MetricsSource>,
    /// Command-line settings.
    pub settings: Settings,
    /// The scaling clock: its state is its own; reconcile only tells it what changed.
    pub clock: Clock,
    /// Reconcile's own book: each model's write guard and failures.
    pub reconciles: Reconciles,
    /// Served names whose gateway admission queue has just filled (see [`wake`]), for every
    /// controller [`run`] starts to map onto its ModelDeployments.
    pub queue_filled: tokio::sync::broadcast::Sender<String>,
    /// Origin of the policy's clock (tokio's: the same as the system's monotonic clock, but
    /// a test may pause and advance it).
    pub started: tokio::time::Instant,
    /// Every ModelDeployment the controller watches (its cache), for the one-owner-per-
    /// served-name rule; set by [`run`], by tests directly.
    pub deployments: std::sync::OnceLock<Store<ModelDeployment>>,
}

impl Context {
    /// A context with fresh memory.
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        metrics_source: Arc<dyn MetricsSource>,
        settings: Settings,
    ) -> Self {
        let reporter = Reporter {
            controller: "tokenscale-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            metrics_source,
            settings,
            clock: Clock::default(),
            reconciles: Reconciles::default(),
            queue_filled: tokio::sync::broadcast::channel(wake::QUEUE_FILLED_BUFFER).0,
            started: tokio::time::Instant::now(),
            deployments: std::sync::OnceLock::new(),
        }
    }

    /// Seconds since the context was made (the policy's clock).
    pub fn now_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Now on the policy's clock and on the wall clock (for status, which outlives us).
    pub fn clocks(&self) -> crate::autoscaler::Clocks {
        crate::autoscaler::Clocks {
            now_s: self.now_s(),
            wall: k8s_openapi::jiff::Timestamp::now(),
        }
    }

    /// Time left before `md` is due for its next decision; `None` when due now (first time,
    /// a new generation, a period has passed, or woken; see [`due::Due::not_due_for`]).
    pub fn not_due_for(&self, md: &ModelDeployment) -> Option<Duration> {
        self.clock.not_due_for(md, self.clocks())
    }

    /// Records that `md` decided now.
    pub fn mark_decided(&self, md: &ModelDeployment) {
        self.clock.mark_decided(md, self.clocks());
    }

    /// Lets `md` decide now, however recently it decided: the scaling clock looks at once.
    pub fn wake(&self, md: &ModelDeployment) {
        self.clock.tell(ClockMsg::Woken {
            object: Arc::new(md.clone()),
            at: self.clocks(),
        });
    }

    /// Sets the scaling loop of `md` (a test's prepared one), as if this process had run it.
    pub fn put_loop(&self, md: &ModelDeployment, scaling: crate::scaling::ScalingLoop) {
        self.clock.put_loop(md, scaling);
    }
}

/// `namespace/name` of a ModelDeployment.
pub fn model_key(md: &ModelDeployment) -> String {
    format!("{}/{}", md.namespace().unwrap_or_default(), md.name_any())
}

/// Brings the cluster in line with one ModelDeployment; see [`apply::reconcile_model`].
pub async fn reconcile(md: Arc<ModelDeployment>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.count_and_measure();
    let key = model_key(&md);
    if md.metadata.deletion_timestamp.is_some() {
        // Children carry ownerReferences: garbage collection removes them. Acting now would
        // only recreate what is being deleted. Forget the model's loop and budget share.
        ctx.reconciles.forget(&key);
        ctx.clock.tell(ClockMsg::Removed { key });
        ctx.metrics.models.remove(&md);
        return Ok(Action::await_change());
    }
    let action = apply::reconcile_model(&md, &ctx).await?;
    ctx.reconciles.succeeded(&key);
    Ok(action)
}

/// Requeues a failed reconcile with exponential backoff; a spec error waits for an edit.
pub fn error_policy(md: Arc<ModelDeployment>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(model = %model_key(&md), reason = error.metric_label(), "reconcile failed: {error}");
    ctx.metrics.reconcile_failure(error);
    if error.is_permanent() {
        return Action::await_change();
    }
    Action::requeue(backoff(ctx.reconciles.failed(&model_key(&md))))
}

/// Delay before retry number `failures` (1-based): 5 s doubling up to 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(16);
    Duration::from_secs((5u64 << exponent).min(300))
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the maps stay valid).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the controller until shutdown, watching ModelDeployments and their children in
/// `namespace` (all namespaces when `None`; see [`WatchScope::controllers`]).
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let client = ctx.client.clone();
    let (mds, deployments, services, pdbs) = match &namespace {
        Some(ns) => (
            Api::<ModelDeployment>::namespaced(client.clone(), ns),
            Api::<Deployment>::namespaced(client.clone(), ns),
            Api::<Service>::namespaced(client.clone(), ns),
            Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client),
        ),
    };
    let children =
        watcher::Config::default().labels("app.kubernetes.io/managed-by=tokenscale-operator");
    // Only changes reconcile acts on trigger it (see `watches`): not the status the scaling
    // clock writes, nor the children's own status.
    let (store, writer) = reflector::store();
    let trigger =
        watches::model_deployments(mds, watcher::Config::default().any_semantic(), writer);
    let controller = Controller::for_stream(trigger, store);
    let _ = ctx.deployments.set(controller.store());
    let wakes = tokio::spawn(wake::relay(ctx.clone(), controller.store()));
    controller
        .owns_stream(watches::children(
            deployments,
            children.clone(),
            watches::deployment_changes,
        ))
        .owns_stream(watches::children(
            services,
            children.clone(),
            watches::intent::<Service>,
        ))
        .owns_stream(watches::children(
            pdbs,
            children,
            watches::intent::<PodDisruptionBudget>,
        ))
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    wakes.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let secs: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(u32::MAX).as_secs(), 300);
    }
}
