//! One owner per served model name. ModelDeployments in different namespaces may ask for the
//! same `servedName`; the oldest (creation time, then namespace, then name) serves it and the
//! others are refused. The operator (a `Conflict` condition, no children) and the gateway's
//! discovery (no traffic) apply this one rule, so a deployment that reuses another namespace's
//! served name never receives that name's prompts, even before its status says so.
//!
//! First come, first served lets anyone who may create a ModelDeployment in any watched
//! namespace claim `gpt-4o` first; [`ServedNames`] makes names owned by declaration: which
//! namespaces may claim which names, in the operator's flags and the gateway's configuration
//! alike.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::glob::glob_match;

/// Which namespaces may claim which served names: namespace (or `*`, any namespace) → name
/// globs. Empty: any namespace may claim any name, first come, first served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct ServedNames(pub BTreeMap<String, Vec<String>>);

impl ServedNames {
    /// Whether no list is set (first come, first served).
    pub fn is_open(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `namespace` may claim `served`: a pattern of its own or of `*` matches.
    pub fn allows(&self, namespace: &str, served: &str) -> bool {
        self.is_open()
            || [namespace, "*"]
                .iter()
                .filter_map(|ns| self.0.get(*ns))
                .flatten()
                .any(|pattern| glob_match(pattern, served))
    }

    /// Adds one `NAMESPACE=GLOB[,GLOB...]` (the operator's `--served-names` flag).
    pub fn add_flag(&mut self, text: &str) -> Result<(), String> {
        let (namespace, globs) = text
            .split_once('=')
            .filter(|(ns, globs)| !ns.trim().is_empty() && !globs.trim().is_empty())
            .ok_or_else(|| {
                format!("`{text}`: expected NAMESPACE=NAME[,NAME...] (globs; `*=NAME` for any namespace)")
            })?;
        let names = globs
            .split(',')
            .map(|g| g.trim().to_string())
            .filter(|g| !g.is_empty());
        self.0
            .entry(namespace.trim().to_string())
            .or_default()
            .extend(names);
        Ok(())
    }
}

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

    #[test]
    fn a_list_lets_each_namespace_claim_only_its_names() {
        assert!(ServedNames::default().allows("anyone", "gpt-4o"));
        let mut names = ServedNames::default();
        names
            .add_flag("team-a=llama-*,meta-llama/*")
            .expect("parses");
        names.add_flag("*=smollm2-135m").expect("parses");
        assert!(names.allows("team-a", "llama-3-8b"));
        assert!(names.allows("team-a", "smollm2-135m"));
        assert!(names.allows("team-b", "smollm2-135m"));
        assert!(!names.allows("team-b", "llama-3-8b"));
        assert!(!names.allows("team-a", "gpt-4o"));
        for bad in ["team-a", "=x", "team-a=", " = "] {
            assert!(names.add_flag(bad).is_err(), "{bad}");
        }
    }

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
