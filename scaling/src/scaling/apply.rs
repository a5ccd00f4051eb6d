//! The async shell around a [`Tick`]: marks the replicas a scale-in removes, then sets the
//! replica count, on any [`ScaleTarget`].

use super::Tick;
use crate::scale::{ScaleError, ScaleTarget};

/// Carries `tick` out on `target`: on a scale-in, first marks the ready replicas that go
/// (least loaded) and clears the marks of the previous scale-in that no longer apply; then
/// sets the count when it changes. Returns the removal marks now in force, for
/// [`ScalingLoop::note_marked`](super::ScalingLoop::note_marked).
pub async fn apply(tick: &Tick, target: &impl ScaleTarget) -> Result<Vec<String>, ScaleError> {
    let mut marked = tick.marked_before.clone();
    if tick.scales_in() {
        // Called even when only replicas that are not ready go (a count of 0): stale marks
        // are cleared so they do not pick the next scale-in's victims.
        marked = target
            .mark_many_for_removal(
                &tick.view.replica_loads,
                tick.mark_for_removal,
                &tick.marked_before,
            )
            .await?;
    }
    if tick.scales() {
        target.set_replicas(tick.target_replicas).await?;
    }
    Ok(marked)
}
