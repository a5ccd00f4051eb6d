//! Least-privilege RBAC: no wildcard anywhere, no verb outside the ordinary read/write set
//! (no `escalate`, `bind`, `impersonate`), no access to Secrets, and rule sets compared
//! verb by verb against what a program uses.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::Violation;

/// Verbs a tokenscale component may be granted.
pub const ORDINARY_VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// Every rule of `rules` (granted by `object`) that breaks least privilege.
pub fn check_rbac_rules(object: &str, rules: &[PolicyRule]) -> Vec<Violation> {
    let mut found = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{object} rule {i}");
        let lists = [
            ("apiGroups", rule.api_groups.as_deref()),
            ("resources", rule.resources.as_deref()),
            ("resourceNames", rule.resource_names.as_deref()),
            ("nonResourceURLs", rule.non_resource_urls.as_deref()),
            ("verbs", Some(rule.verbs.as_slice())),
        ];
        for (field, values) in lists {
            if values.into_iter().flatten().any(|v| v.contains('*')) {
                found.push(Violation {
                    object: at.clone(),
                    rule: "no RBAC wildcards",
                    detail: format!("{field}: {values:?}"),
                });
            }
        }
        for verb in rule
            .verbs
            .iter()
            .filter(|v| !v.contains('*') && !ORDINARY_VERBS.contains(&v.as_str()))
        {
            found.push(Violation {
                object: at.clone(),
                rule: "ordinary verbs only",
                detail: verb.clone(),
            });
        }
        if rule.resources.iter().flatten().any(|r| r == "secrets") {
            found.push(Violation {
                object: at.clone(),
                rule: "no access to Secrets",
                detail: format!("{:?}", rule.verbs),
            });
        }
    }
    found
}

/// A rule set as (apiGroup, resource, verb) triples, so two rule sets compare regardless of
/// how they are grouped into rules.
pub fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            verbs: strings(verbs),
            ..Default::default()
        }
    }

    fn rules_broken(rules: &[PolicyRule]) -> Vec<&'static str> {
        check_rbac_rules("ClusterRole r", rules)
            .into_iter()
            .map(|v| v.rule)
            .collect()
    }

    #[test]
    fn least_privilege_rules_pass() {
        assert!(
            rules_broken(&[rule(&["apps"], &["deployments"], &["get", "list", "watch"])])
                .is_empty()
        );
    }

    #[test]
    fn wildcards_are_caught_in_every_field() {
        assert_eq!(
            rules_broken(&[rule(&["apps"], &["deployments"], &["*"])]),
            ["no RBAC wildcards"]
        );
        assert_eq!(
            rules_broken(&[rule(&["*"], &["deployments"], &["get"])]),
            ["no RBAC wildcards"]
        );
        assert_eq!(
            rules_broken(&[rule(&["apps"], &["deployments/*"], &["get"])]),
            ["no RBAC wildcards"]
        );
    }

    #[test]
    fn escalation_verbs_and_secrets_are_caught() {
        assert_eq!(
            rules_broken(&[rule(
                &["rbac.authorization.k8s.io"],
                &["roles"],
                &["escalate"]
            )]),
            ["ordinary verbs only"]
        );
        assert_eq!(
            rules_broken(&[rule(&[""], &["secrets"], &["get"])]),
            ["no access to Secrets"]
        );
    }

    #[test]
    fn grants_ignore_how_rules_are_grouped() {
        let one = [rule(
            &["apps"],
            &["deployments", "deployments/scale"],
            &["get", "patch"],
        )];
        let split = [
            rule(&["apps"], &["deployments"], &["get", "patch"]),
            rule(&["apps"], &["deployments/scale"], &["patch", "get"]),
        ];
        assert_eq!(grants(&one), grants(&split));
        assert_ne!(grants(&one), grants(&split[..1]));
    }
}
