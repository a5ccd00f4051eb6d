//! Scale from zero within a second: the gateway's queue watch names each served model whose
//! admission queue has just filled; the ModelDeployments serving it at zero replicas are let
//! past the due-gate once and the scaling clock decides for them at once, so the
//! scale-from-zero rule starts a replica now instead of at the model's next period.

use std::sync::Arc;

use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::Store;
use tokio::sync::{broadcast, mpsc};

use crate::children::served_name;
use crate::controller::{Context, model_key};
use crate::crd::ModelDeployment;
use crate::metrics_source::ScrapeSource;

/// Filled-queue names buffered per controller: a burst of cold models fits; a controller that
/// falls further behind skips the oldest (their models still decide at their period).
pub const QUEUE_FILLED_BUFFER: usize = 64;

/// The ModelDeployments in `all` a filled queue for `served` wakes: those serving that name
/// whose autoscaler wants no replica. Where replicas exist, a queue is load, which the
/// period's decision handles; without a status the model has never decided and is due anyway.
pub fn to_wake<'a>(
    served: &'a str,
    all: &'a [Arc<ModelDeployment>],
) -> impl Iterator<Item = &'a Arc<ModelDeployment>> + 'a {
    all.iter().filter(move |md| {
        served_name(md) == served
            && md.metadata.deletion_timestamp.is_none()
            && md.status.as_ref().is_none_or(|s| s.desired_replicas == 0)
    })
}

/// Wakes, for each name on `ctx.queue_filled`, its models in `store` (see [`to_wake`]);
/// returns the names of the models woken, for each name, as a stream (what [`relay`] drives).
pub fn triggers(
    ctx: Arc<Context>,
    store: Store<ModelDeployment>,
) -> impl Stream<Item = Vec<String>> + Send + 'static {
    filled_queues(ctx.queue_filled.subscribe()).map(move |served| {
        let all = store.state();
        let woken: Vec<String> = to_wake(&served, &all)
            .map(|md| {
                ctx.wake(md);
                model_key(md)
            })
            .collect();
        if !woken.is_empty() {
            tracing::info!(model_name = %served, models = woken.len(), "queue filled at zero replicas: deciding now");
        }
        woken
    })
}

/// Runs [`triggers`] for one controller's `store` until the queue watch ends.
pub async fn relay(ctx: Arc<Context>, store: Store<ModelDeployment>) {
    triggers(ctx, store).for_each(|_| async {}).await;
}

/// The served names a broadcast receiver gets, skipping over any it lagged behind on.
fn filled_queues(receiver: broadcast::Receiver<String>) -> impl Stream<Item = String> {
    stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(served) => return Some((served, receiver)),
                Err(broadcast::error::RecvError::Lagged(skipped)) => {
                    tracing::warn!(skipped, "controller fell behind the queue watch");
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// Runs `source`'s queue watch and hands each name it sends to every controller (through
/// `ctx.queue_filled`: one controller per watched namespace); returns when the watch does,
/// at once without a gateway.
pub async fn watch_queues(source: Arc<ScrapeSource>, ctx: Arc<Context>) {
    let (sender, mut names) = mpsc::channel(QUEUE_FILLED_BUFFER);
    let relay = async move {
        while let Some(served) = names.recv().await {
            // No controller subscribed (none running yet) is not an error: nothing to wake.
            let _ = ctx.queue_filled.send(served);
        }
    };
    futures::future::join(source.watch_queues(sender), relay).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ModelDeploymentStatus;

    fn md(name: &str, served: Option<&str>, desired: Option<i32>) -> Arc<ModelDeployment> {
        let mut md: ModelDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "tokenscale.dev/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "model": {"source": "smollm2-135m-instruct", "servedName": served},
                "engine": {"backend": "cpu"},
                "replicas": {"min": 0, "max": 3},
                "slo": {"ttftP95": "500ms", "tpotP95": "50ms"}
            }
        }))
        .expect("test object parses");
        md.status = desired.map(|desired_replicas| ModelDeploymentStatus {
            desired_replicas,
            ..ModelDeploymentStatus::default()
        });
        Arc::new(md)
    }

    fn names(served: &str, all: &[Arc<ModelDeployment>]) -> Vec<String> {
        to_wake(served, all)
            .map(|md| md.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_filled_queue_wakes_the_models_serving_it_at_zero_replicas_only() {
        let all = [
            md("cold", Some("llama"), Some(0)),
            md("warm", Some("llama"), Some(2)),
            md("other", Some("qwen"), Some(0)),
            md("new", Some("llama"), None),
        ];
        assert_eq!(names("llama", &all), ["cold", "new"]);
        assert!(names("mistral", &all).is_empty());
    }

    #[test]
    fn without_a_served_name_the_object_name_is_served() {
        let all = [md("smollm2", None, Some(0))];
        assert_eq!(names("smollm2", &all), ["smollm2"]);
    }
}
