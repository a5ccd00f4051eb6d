//! One owner per served name (the rules are `tokenscale_common::served_name`, which the
//! gateway's discovery applies too): a ModelDeployment is refused when its namespace may not
//! claim its served name (`--served-names`, names owned by declaration), or when an older one
//! in another namespace already serves it. It gets no children, a `Conflict` condition saying
//! why (and naming the owner), a Warning Event the first time, and is looked at again every
//! 30 s, so it takes over once the owner is gone or the list allows it. Children it had before
//! it was refused are left to its owner reference.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tokenscale_common::served_name::{self, Claim};

use super::apply::patch_status;
use super::status::condition;
use crate::children::served_name;
use crate::crd::{CONDITION_CONFLICT, CONDITION_READY, ModelDeployment};
use crate::error::{Error, Result};

/// How often a refused deployment is looked at again.
const RECHECK: Duration = Duration::from_secs(30);

/// `namespace/name` of the older deployment that serves `md`'s served name, if any.
pub fn taken_by(md: &ModelDeployment, all: &[Arc<ModelDeployment>]) -> Option<String> {
    let served: Vec<(String, String, String, Option<i64>)> =
        all.iter().map(|other| claim_parts(other)).collect();
    let claims: Vec<Claim<'_>> = served.iter().map(as_claim).collect();
    let mine = claim_parts(md);
    let owner = served_name::taken_by(&as_claim(&mine), &claims)?;
    Some(format!("{}/{}", owner.namespace, owner.name))
}

fn claim_parts(md: &ModelDeployment) -> (String, String, String, Option<i64>) {
    (
        md.namespace().unwrap_or_default(),
        md.name_any(),
        served_name(md),
        md.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
    )
}

fn as_claim(parts: &(String, String, String, Option<i64>)) -> Claim<'_> {
    Claim {
        namespace: &parts.0,
        name: &parts.1,
        served_name: &parts.2,
        created_s: parts.3,
    }
}

/// Why a ModelDeployment may not serve its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Its namespace may not claim the name (`--served-names`).
    NotAllowed,
    /// An older deployment (`namespace/name`) serves it.
    Taken(String),
}

impl Refusal {
    /// The condition's and the Event's reason.
    fn reason(&self) -> &'static str {
        match self {
            Self::NotAllowed => "ServedNameNotAllowed",
            Self::Taken(_) => "ServedNameTaken",
        }
    }

    fn message(&self, md: &ModelDeployment) -> String {
        let (served, namespace) = (served_name(md), md.namespace().unwrap_or_default());
        match self {
            Self::NotAllowed => format!(
                "namespace `{namespace}` may not claim the served name `{served}`: the operator's \
                 --served-names list does not give it this name; pick a name it lists, or ask \
                 for it to be added"
            ),
            Self::Taken(owner) => format!(
                "served name `{served}` is already served by ModelDeployment {owner}, created \
                 earlier; pick another servedName, or delete that one"
            ),
        }
    }
}

/// Why `md` may not serve its name, if it may not: the allow-list first, then the owner of
/// the name from the controller's cache of every ModelDeployment it watches (none known: no
/// conflict).
pub async fn check(md: &ModelDeployment, ctx: &super::Context) -> Option<Refusal> {
    let namespace = md.namespace().unwrap_or_default();
    if !ctx
        .settings
        .served_names
        .allows(&namespace, &served_name(md))
    {
        return Some(Refusal::NotAllowed);
    }
    let store = ctx.deployments.get()?;
    // The cache fills with the first listing; give it a moment on a fresh start.
    let _ = tokio::time::timeout(Duration::from_secs(5), store.wait_until_ready()).await;
    taken_by(md, &store.state()).map(Refusal::Taken)
}

/// Writes the refusal into `md`'s status (and, when it is new, a Warning Event) and asks to
/// be looked at again later.
pub async fn refuse(
    md: &ModelDeployment,
    ctx: &super::Context,
    namespace: &str,
    refusal: &Refusal,
) -> Result<Action> {
    let mut status = md.status.clone().unwrap_or_default();
    let previous = status.conditions.clone();
    let (now, generation) = (k8s_openapi::jiff::Timestamp::now(), md.metadata.generation);
    let message = refusal.message(md);
    let reason = refusal.reason();
    let new = !previous
        .iter()
        .any(|c| c.type_ == CONDITION_CONFLICT && c.status == "True" && c.reason == reason);
    status.conditions = vec![
        condition(
            &previous,
            CONDITION_CONFLICT,
            true,
            reason,
            message.clone(),
            generation,
            now,
        ),
        condition(
            &previous,
            CONDITION_READY,
            false,
            "Conflict",
            message.clone(),
            generation,
            now,
        ),
    ];
    status.observed_generation = generation;
    tracing::warn!(model = %super::model_key(md), ?refusal, "served name refused");
    patch_status(md, ctx, namespace, status).await?;
    if new {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(message.chars().take(1000).collect()),
            action: "Refuse".into(),
            secondary: None,
        };
        ctx.recorder
            .publish(&event, &md.object_ref(&()))
            .await
            .map_err(|e| Error::kube("publishing a served-name Event", e))?;
    }
    Ok(Action::requeue(RECHECK))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(namespace: &str, name: &str, served: &str, created_s: i64) -> Arc<ModelDeployment> {
        let created = k8s_openapi::jiff::Timestamp::from_second(created_s).expect("time");
        let object = serde_json::json!({
            "apiVersion": "tokenscale.dev/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": namespace,
                         "creationTimestamp": created.to_string()},
            "spec": {
                "model": {"source": "pvc://w/m.gguf", "servedName": served},
                "engine": {"image": "e", "backend": "cpu"},
                "replicas": {"min": 1, "max": 2},
                "slo": {"ttftP95": "1s", "tpotP95": "100ms"}
            }
        });
        Arc::new(serde_json::from_value(object).expect("parses"))
    }

    #[test]
    fn the_younger_claim_is_refused_naming_the_owner() {
        let owner = md("team-a", "llama", "llama-3", 100);
        let copy = md("team-b", "mine", "llama-3", 200);
        let other = md("team-c", "qwen", "qwen", 50);
        let all = [owner.clone(), copy.clone(), other];
        assert_eq!(taken_by(&copy, &all).as_deref(), Some("team-a/llama"));
        assert_eq!(taken_by(&owner, &all), None);
    }
}
