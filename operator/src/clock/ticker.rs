//! The operator's scaling clock: one loop, on a timer, that samples every model's metrics and
//! decides for each model that is due, as `tokenscale up` ticks its process pool and
//! `tokenscale sim` its simulated replicas. Reconciles only apply children and hand the
//! object over (see [`crate::controller::apply`]); they never decide.
//!
//! Deciding inside reconcile, as the operator did before, needed a due-gate against the
//! reconciles its own status writes trigger, and tied the decision's timing to kube-runtime's
//! requeues. On a clock, a model decides once a period (its due-gate), at once when it is new,
//! edited or woken by the gateway's queue watch ([`Context::wake`]).

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;

use super::sampler;
use crate::controller::{Context, backoff, model_key};

/// Ticks every `every` until the task is dropped: a sample round (when the metrics source
/// scrapes and `every` is not zero), then a decision for each model that is due. A wake, or
/// a reconcile handing over a new object, makes it look at once.
pub async fn run(ctx: Arc<Context>, every: Duration) {
    let sampling = ctx.metrics_source.scrapes() && !every.is_zero();
    // Without sampling, the clock still looks once a second for models that are due.
    let mut ticks = tokio::time::interval(if every.is_zero() {
        Duration::from_secs(1)
    } else {
        every
    });
    // A slow round (a scrape that times out) is not made up for with a burst of rounds.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                if sampling {
                    sampler::sample(&ctx).await;
                }
            }
            () = ctx.clock.decide_now.notified() => {}
        }
        decide_due(&ctx).await;
    }
}

/// Decides, concurrently, for every model due now. A failed decision is logged, counted, and
/// retried after a backoff (5 s doubling up to 5 minutes); the model's status keeps the last
/// decision that succeeded.
pub async fn decide_due(ctx: &Context) {
    let due = ctx.clock.models().due(ctx.now_s());
    join_all(due.iter().map(|md| async move {
        if let Err(error) = super::decide::decide(md, ctx).await {
            let key = model_key(md);
            tracing::warn!(model = %key, reason = error.metric_label(), "decision failed: {error}");
            ctx.metrics.reconcile_failure(&error);
            let now_s = ctx.now_s();
            if let Some(entry) = ctx.clock.models().get_mut(&key) {
                entry.decision_failures += 1;
                entry
                    .due
                    .retry_after(now_s, backoff(entry.decision_failures));
            }
        }
    }))
    .await;
}
