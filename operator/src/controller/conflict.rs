//! One owner per served name (the rule is `tokenscale_common::served_name`, which the
//! gateway's discovery applies too): a ModelDeployment whose served name an older one in
//! another namespace already serves is refused. It gets no children and a `Conflict`
//! condition naming the owner, and is looked at again every 30 s, so it takes over once the
//! owner is gone. Children it had before it was refused are left to its owner reference.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use tokenscale_common::served_name::{self, Claim};

use super::apply::patch_status;
use super::status::condition;
use crate::children::served_name;
use crate::crd::{CONDITION_CONFLICT, CONDITION_READY, ModelDeployment};
use crate::error::Result;

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

/// The owner of `md`'s served name when it is another deployment, from the controller's
/// cache of every ModelDeployment it watches (none known: no conflict).
pub async fn check(md: &ModelDeployment, store: Option<&Store<ModelDeployment>>) -> Option<String> {
    let store = store?;
    // The cache fills with the first listing; give it a moment on a fresh start.
    let _ = tokio::time::timeout(Duration::from_secs(5), store.wait_until_ready()).await;
    taken_by(md, &store.state())
}

/// Writes the refusal into `md`'s status and asks to be looked at again later.
pub async fn refuse(
    md: &ModelDeployment,
    ctx: &super::Context,
    namespace: &str,
    owner: &str,
) -> Result<Action> {
    let mut status = md.status.clone().unwrap_or_default();
    let previous = status.conditions.clone();
    let (now, generation) = (k8s_openapi::jiff::Timestamp::now(), md.metadata.generation);
    let message = format!(
        "served name `{}` is already served by ModelDeployment {owner}, created earlier; \
         pick another servedName, or delete that one",
        served_name(md)
    );
    status.conditions = vec![
        condition(
            &previous,
            CONDITION_CONFLICT,
            true,
            "ServedNameTaken",
            message.clone(),
            generation,
            now,
        ),
        condition(
            &previous,
            CONDITION_READY,
            false,
            "Conflict",
            message,
            generation,
            now,
        ),
    ];
    status.observed_generation = generation;
    tracing::warn!(model = %super::model_key(md), %owner, "served name taken: refused");
    patch_status(md, ctx, namespace, status).await?;
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
