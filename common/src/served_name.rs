//! One owner per served model name. ModelDeployments in different namespaces may ask for the
//! same `servedName`; the oldest (creation time, then namespace, then name) serves it and the
//! others are refused. The operator (a `Conflict` condition, no children) and the gateway's
//! discovery (no traffic) apply this one rule, so a deployment that reuses another namespace's
//! served name never receives that name's prompts, even before its status says so.

use std::collections::BTreeMap;

/// A ModelDeployment's claim on a served name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The served name it asks for.
    pub served_name: &'a str,
    /// Creation time in seconds since the Unix epoch; `None` (not yet created) sorts last.
    pub created_s: Option<i64>,
}

impl Claim<'_> {
    /// The order of precedence: older first; ties (same second) by namespace, then name.
    fn rank(&self) -> (i64, &str, &str) {
        (
            self.created_s.unwrap_or(i64::MAX),
            self.namespace,
            self.name,
        )
    }
}

/// The owner of each served name among `claims`: served name → (namespace, name).
pub fn owners<'a>(claims: &[Claim<'a>]) -> BTreeMap<&'a str, (&'a str, &'a str)> {
    let mut best: BTreeMap<&'a str, Claim<'a>> = BTreeMap::new();
    for claim in claims {
        best.entry(claim.served_name)
            .and_modify(|kept| {
                if claim.rank() < kept.rank() {
                    *kept = *claim;
                }
            })
            .or_insert(*claim);
    }
    best.into_iter()
        .map(|(served, c)| (served, (c.namespace, c.name)))
        .collect()
}

/// The claim that owns `claim`'s served name when it is not `claim` itself.
pub fn taken_by<'a>(claim: &Claim<'_>, others: &[Claim<'a>]) -> Option<Claim<'a>> {
    others
        .iter()
        .filter(|o| o.served_name == claim.served_name)
        .filter(|o| (o.namespace, o.name) != (claim.namespace, claim.name))
        .filter(|o| o.rank() < claim.rank())
        .min_by(|a, b| a.rank().cmp(&b.rank()))
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim<'a>(namespace: &'a str, name: &'a str, served: &'a str, created: i64) -> Claim<'a> {
        Claim {
            namespace,
            name,
            served_name: served,
            created_s: Some(created),
        }
    }

    #[test]
    fn the_oldest_claim_owns_a_served_name() {
        let claims = [
            claim("team-b", "copy", "llama", 200),
            claim("team-a", "llama", "llama", 100),
            claim("team-c", "other", "qwen", 300),
        ];
        let owners = owners(&claims);
        assert_eq!(owners["llama"], ("team-a", "llama"));
        assert_eq!(owners["qwen"], ("team-c", "other"));
        assert_eq!(
            taken_by(&claims[0], &claims).map(|c| c.namespace),
            Some("team-a")
        );
        assert_eq!(taken_by(&claims[1], &claims), None);
        assert_eq!(taken_by(&claims[2], &claims), None);
    }

    #[test]
    fn ties_go_by_namespace_then_name_and_unknown_times_go_last() {
        let claims = [
            claim("b", "x", "m", 100),
            claim("a", "y", "m", 100),
            Claim {
                created_s: None,
                ..claim("0", "z", "m", 0)
            },
        ];
        assert_eq!(owners(&claims)["m"], ("a", "y"));
        assert_eq!(
            taken_by(&claims[2], &claims).map(|c| c.namespace),
            Some("a")
        );
    }
}
