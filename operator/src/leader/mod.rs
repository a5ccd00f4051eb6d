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

/// Decides what `me` does given the Lease (`None`: it does not exist) at `now_s`.
pub fn decide(lease: Option<&LeaseState>, me: &str, now_s: f64) -> LeaseAction {
    let Some(lease) = lease else {
        return LeaseAction::Acquire;
    };
    match lease.holder.as_deref() {
        None | Some("") => LeaseAction::Acquire,
        Some(holder) if holder == me => LeaseAction::Renew,
        Some(holder) => {
            let expired = lease
                .renewed_s
                .is_none_or(|renewed| now_s > renewed + lease.duration_s);
            if expired {
                LeaseAction::Acquire
            } else {
                LeaseAction::Follow {
                    holder: holder.to_string(),
                }
            }
        }
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
        }
    }

    /// One round: acquire or renew if the decision says so. `Ok(true)` while we lead.
    pub async fn try_lead(&self) -> Result<bool, kube::Error> {
        let existing = self.api.get_opt(&self.name).await?;
        let now = Timestamp::now();
        let now_s = now.as_millisecond() as f64 / 1e3;
        let action = decide(
            existing.as_ref().map(lease_state).as_ref(),
            &self.identity,
            now_s,
        );
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

    /// Waits until this replica leads, retrying every `retry`.
    pub async fn acquire(&self, retry: Duration) {
        loop {
            match self.try_lead().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election round failed"),
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Renews every third of a term; returns when leadership is lost (a renewal failed for a
    /// whole term, or someone else took the Lease), so the caller stops acting.
    pub async fn hold(&self) {
        let mut last_success = std::time::Instant::now();
        loop {
            tokio::time::sleep(self.duration / 3).await;
            match self.try_lead().await {
                Ok(true) => last_success = std::time::Instant::now(),
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "renewing the leader lease failed");
                    if last_success.elapsed() >= self.duration {
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
        assert_eq!(decide(None, "a", 100.0), LeaseAction::Acquire);
        let empty = LeaseState {
            holder: None,
            renewed_s: None,
            duration_s: 15.0,
        };
        assert_eq!(decide(Some(&empty), "a", 100.0), LeaseAction::Acquire);
    }

    #[test]
    fn own_lease_is_renewed_and_a_live_one_followed() {
        assert_eq!(
            decide(Some(&held_by("a", 95.0)), "a", 100.0),
            LeaseAction::Renew
        );
        assert_eq!(
            decide(Some(&held_by("b", 95.0)), "a", 100.0),
            LeaseAction::Follow { holder: "b".into() }
        );
    }

    #[test]
    fn an_expired_term_is_taken_over_never_a_live_one() {
        // Renewed at 80 for 15 s: live until 95 inclusive.
        assert_eq!(
            decide(Some(&held_by("b", 80.0)), "a", 95.0),
            LeaseAction::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&held_by("b", 80.0)), "a", 95.1),
            LeaseAction::Acquire
        );
    }
}
