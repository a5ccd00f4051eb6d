//! Leader election through a `coordination.k8s.io` Lease, so two operator replicas never both
//! act: a pure decision over what the Lease says, and a thin shell that reads and writes it
//! with optimistic concurrency (a write on a stale `resourceVersion` fails with 409).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};

/// What to do with the Lease now.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseAction {
    /// Nobody holds it, or the holder's term expired: take it.
    Acquire,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds a live term: wait.
    Follow {
        /// The current holder.
        holder: String,
    },
}

/// The parts of a Lease the decision reads.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseState {
    /// Current holder, if any.
    pub holder: Option<String>,
    /// Last renewal, seconds since the Unix epoch.
    pub renewed_s: Option<f64>,
    /// Length of a term, seconds.
    pub duration_s: f64,
}

/// The Lease record as last read (holder and renewal), and when this process first saw it, on
/// its own clock. A term is over only when the record stayed unchanged for a whole term since
/// this process first saw it, as client-go decides: the renewal time was written by another
/// node's clock, and comparing it with ours would let a fast clock take a live lease.
#[derive(Debug, Default)]
pub struct Observation {
    /// The record and the local time it was first seen.
    seen: Option<(Record, f64)>,
}

/// What identifies one write of the Lease: its holder and renewal time.
type Record = (Option<String>, Option<f64>);

impl Observation {
    /// Notes `lease` read at local time `now_s`; returns how long, in local seconds, this
    /// process has seen that record unchanged (0 when it is new).
    pub fn unchanged_for(&mut self, lease: &LeaseState, now_s: f64) -> f64 {
        let record = (lease.holder.clone(), lease.renewed_s);
        match &self.seen {
            Some((seen, since)) if *seen == record => now_s - since,
            _ => {
                self.seen = Some((record, now_s));
                0.0
            }
        }
    }
}

/// Decides what `me` does given the Lease (`None`: it does not exist), which this process has
/// seen unchanged for `unchanged_for_s` seconds of its own clock (see [`Observation`]).
pub fn decide(lease: Option<&LeaseState>, me: &str, unchanged_for_s: f64) -> LeaseAction {
    let Some(lease) = lease else {
        return LeaseAction::Acquire;
    };
    match lease.holder.as_deref() {
        None | Some("") => LeaseAction::Acquire,
        Some(holder) if holder == me => LeaseAction::Renew,
        Some(_) if unchanged_for_s > lease.duration_s => LeaseAction::Acquire,
        Some(holder) => LeaseAction::Follow {
            holder: holder.to_string(),
        },
    }
}

/// Reads a Lease into the decision's terms.
pub fn lease_state(lease: &Lease) -> LeaseState {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseState {
        holder: spec.holder_identity,
        renewed_s: spec.renew_time.map(|t| t.0.as_millisecond() as f64 / 1e3),
        duration_s: f64::from(spec.lease_duration_seconds.unwrap_or(15)),
    }
}

/// Holds or contends for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// The record as this process saw it, timed on `started`'s clock.
    observation: std::sync::Mutex<Observation>,
    started: tokio::time::Instant,
}

impl LeaderElector {
    /// Contends for Lease `name` in `namespace` as `identity`, with terms of `duration`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            duration,
            observation: std::sync::Mutex::default(),
            started: tokio::time::Instant::now(),
        }
    }

    /// A leader stops acting when its renewals have failed this long: two thirds of a term
    /// (client-go's renew deadline against its lease duration), so it has stopped before
    /// another replica can see the term run out.
    fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// One round, bounded by a third of a term (a hung API call counts as a failure).
    async fn round(&self) -> Result<bool, String> {
        match tokio::time::timeout(self.duration / 3, self.try_lead()).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", self.duration / 3)),
        }
    }

    /// One round: acquire or renew if the decision says so. `Ok(true)` while we lead.
    pub async fn try_lead(&self) -> Result<bool, kube::Error> {
        let existing = self.api.get_opt(&self.name).await?;
        let now = Timestamp::now();
        let state = existing.as_ref().map(lease_state);
        let local_s = self.started.elapsed().as_secs_f64();
        let unchanged_for_s = state.as_ref().map_or(0.0, |state| {
            self.observation
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .unchanged_for(state, local_s)
        });
        let action = decide(state.as_ref(), &self.identity, unchanged_for_s);
        if let LeaseAction::Follow { .. } = action {
            return Ok(false);
        }
        let previous = existing
            .as_ref()
            .and_then(|l| l.spec.clone())
            .unwrap_or_default();
        let taking_over = action == LeaseAction::Acquire;
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.duration.as_secs()).unwrap_or(15)),
            acquire_time: if taking_over {
                Some(MicroTime(now))
            } else {
                previous.acquire_time
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(
                previous.lease_transitions.unwrap_or(0)
                    + i32::from(taking_over && existing.is_some()),
            ),
            ..Default::default()
        };
        let result = match existing {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // The resourceVersion we read makes this write fail if anyone wrote since.
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up on shutdown, as client-go's release on cancel does: holder cleared
    /// and a 1 s term, so another replica takes over at once instead of after a whole term.
    /// Best effort, bounded by a third of a term; a Lease held by someone else is left alone.
    pub async fn release(&self) {
        let give_up = async {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else {
                return Ok(false);
            };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            // On the version read: a write since (someone else's) is not undone.
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
                .map(|_| true)
        };
        match tokio::time::timeout(self.duration / 3, give_up).await {
            Ok(Ok(true)) => tracing::info!(lease = %self.name, "leader lease released"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader lease failed"),
            Err(_) => tracing::warn!("releasing the leader lease timed out"),
        }
    }

    /// Waits until this replica leads, retrying every `retry`.
    pub async fn acquire(&self, retry: Duration) {
        loop {
            match self.round().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election round failed"),
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Renews every third of a term; returns when leadership is lost (renewals failed for the
    /// renew deadline, or someone else took the Lease), so the caller stops acting.
    pub async fn hold(&self) {
        let mut last_success = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.duration / 3).await;
            match self.round().await {
                Ok(true) => last_success = tokio::time::Instant::now(),
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "renewing the leader lease failed");
                    if last_success.elapsed() >= self.renew_deadline() {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str, renewed_s: f64) -> LeaseState {
        LeaseState {
            holder: Some(holder.into()),
            renewed_s: Some(renewed_s),
            duration_s: 15.0,
        }
    }

    #[test]
    fn missing_or_empty_lease_is_acquired() {
        assert_eq!(decide(None, "a", 0.0), LeaseAction::Acquire);
        let empty = LeaseState {
            holder: None,
            renewed_s: None,
            duration_s: 15.0,
        };
        assert_eq!(decide(Some(&empty), "a", 0.0), LeaseAction::Acquire);
    }

    #[test]
    fn own_lease_is_renewed_and_a_live_one_followed() {
        assert_eq!(
            decide(Some(&held_by("a", 95.0)), "a", 0.0),
            LeaseAction::Renew
        );
        assert_eq!(
            decide(Some(&held_by("b", 95.0)), "a", 5.0),
            LeaseAction::Follow { holder: "b".into() }
        );
    }

    #[test]
    fn a_term_is_over_only_after_a_whole_term_unchanged_on_our_clock() {
        // Seen unchanged for 15 s of a 15 s term: still live; past it: taken over.
        assert_eq!(
            decide(Some(&held_by("b", 80.0)), "a", 15.0),
            LeaseAction::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&held_by("b", 80.0)), "a", 15.1),
            LeaseAction::Acquire
        );
    }

    #[test]
    fn the_holders_renewal_time_is_never_compared_with_our_clock() {
        // The holder's clock is an hour behind ours: its renewal looks an hour old, but this
        // process has only just seen it, so it is followed.
        let mut seen = Observation::default();
        let behind = held_by("b", 1_000.0 - 3_600.0);
        assert_eq!(seen.unchanged_for(&behind, 1_000.0), 0.0);
        assert_eq!(seen.unchanged_for(&behind, 1_010.0), 10.0);
        // It renews (a new renewal time): a new record, seen from now on.
        let renewed = held_by("b", 1_012.0 - 3_600.0);
        assert_eq!(seen.unchanged_for(&renewed, 1_012.0), 0.0);
        assert_eq!(seen.unchanged_for(&renewed, 1_020.0), 8.0);
        // Silent for a whole term on our clock: over.
        let unchanged = seen.unchanged_for(&renewed, 1_027.5);
        assert_eq!(decide(Some(&renewed), "a", unchanged), LeaseAction::Acquire);
    }
}
