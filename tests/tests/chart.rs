//! The Helm chart, checked with a real `helm` (v4, installed by scripts/setup): lint and
//! render over the default values and every `ci/*-values.yaml`, then every rendered object
//! passes `kubernetes-validate --strict`, parses as its k8s-openapi type with no unknown
//! field, and passes the pod-security and RBAC checks of `tokenscale_e2e::k8s_checks`.
//! Nothing here is skipped: a missing tool fails with the command that installs it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tokenscale_e2e::chart::{Render, ci_values_files, declared_min_kube_version};
use tokenscale_e2e::k8s_checks::rbac::check_rbac_rules;
use tokenscale_e2e::k8s_checks::security::check_pod_security;
use tokenscale_e2e::k8s_checks::{Object, Typed, parse_documents};
use tokenscale_e2e::tools::{kubernetes_validate_versions, python_with, run};

mod chart {
    pub mod admin_port;
    pub mod admission_policy;
    pub mod batch;
    pub mod crd;
    pub mod dashboard;
    pub mod engine_pods;
    pub mod features;
    pub mod flags;
    pub mod gateway_config;
    pub mod images;
    pub mod rbac;
    pub mod redis;
}

/// Newest Kubernetes the checks cover: the k8s-openapi `latest` feature (v1_37).
const NEWEST_KUBE_VERSION: &str = "1.37.0";

/// One `helm template` of the chart.
pub struct Rendered {
    /// `default` or the values file name.
    pub label: String,
    /// The values file, if any.
    pub values: Option<PathBuf>,
    /// The YAML stream helm printed.
    pub yaml: String,
    /// Its objects.
    pub objects: Vec<Object>,
}

impl Rendered {
    /// Objects of `kind`.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Object> + 'a {
        self.objects.iter().filter(move |o| o.kind == kind)
    }

    /// The one object of `kind` named `name`; panics with the names present otherwise.
    pub fn get<'a>(&'a self, kind: &'a str, name: &str) -> &'a Object {
        self.of_kind(kind)
            .find(|o| o.name == name)
            .unwrap_or_else(|| {
                let names: Vec<&str> = self.of_kind(kind).map(|o| o.name.as_str()).collect();
                panic!("[{}] no {kind} {name:?}; have {names:?}", self.label)
            })
    }
}

/// Renders `render` and parses it; panics with helm's output when either fails.
pub fn render(label: &str, render: &Render) -> Rendered {
    let yaml = render
        .template()
        .unwrap_or_else(|e| panic!("[{label}] helm template: {e}"));
    let objects = parse_documents(&yaml).unwrap_or_else(|e| panic!("[{label}] rendered YAML: {e}"));
    Rendered {
        label: label.into(),
        values: render.values.map(Path::to_path_buf),
        yaml,
        objects,
    }
}

/// The chart rendered over its defaults with `--set` assignments `set`.
pub fn render_set(label: &str, set: &[&str]) -> Rendered {
    render(
        label,
        &Render {
            set,
            ..Render::default()
        },
    )
}

/// The chart rendered over its defaults and every ci values file, as a cluster with the
/// Prometheus Operator at Kubernetes `version` would see it.
pub fn renders_at(version: &str) -> Vec<Rendered> {
    let mut cases: Vec<(String, Option<PathBuf>)> = vec![("default".into(), None)];
    for file in ci_values_files() {
        let label = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        cases.push((label, Some(file)));
    }
    cases
        .iter()
        .map(|(label, values)| {
            let r = Render {
                values: values.as_deref(),
                monitoring_api: true,
                kube_version: Some(version),
                ..Default::default()
            };
            render(label, &r)
        })
        .collect()
}

/// [`renders_at`] the declared minimum Kubernetes version, rendered once for all tests.
pub fn renders() -> &'static [Rendered] {
    static RENDERS: OnceLock<Vec<Rendered>> = OnceLock::new();
    RENDERS.get_or_init(|| {
        let version = declared_min_kube_version().unwrap_or_else(|e| panic!("{e}"));
        renders_at(&version)
    })
}

/// The default render.
pub fn default_render() -> &'static Rendered {
    &renders()[0]
}

/// The render of `ci/<name>`.
pub fn ci_render(name: &str) -> &'static Rendered {
    renders()
        .iter()
        .find(|r| r.label == name)
        .unwrap_or_else(|| panic!("no ci/{name} in the chart"))
}

/// A scratch folder for files handed to tools, removed when the guard drops.
pub fn scratch_dir(name: &str) -> tokenscale_scratch::Scratch {
    tokenscale_scratch::scratch!(&format!("chart-{name}"))
}

#[test]
fn lint_passes_for_the_defaults_and_every_ci_values_file() {
    let files = ci_values_files();
    let mut cases: Vec<Option<&Path>> = vec![None];
    cases.extend(files.iter().map(|f| Some(f.as_path())));
    for values in cases {
        let result = Render {
            values,
            ..Default::default()
        }
        .lint();
        assert!(
            result.is_ok(),
            "helm lint {values:?}: {}",
            result.err().map(|e| e.to_string()).unwrap_or_default()
        );
    }
}

#[test]
fn ci_values_cover_namespaced_monitoring_network_policy_and_existing_secret() {
    let names: Vec<String> = ci_values_files()
        .iter()
        .filter_map(|f| f.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    for mode in [
        "namespaced",
        "monitoring",
        "networkpolicy",
        "existing-secret",
    ] {
        assert!(
            names.iter().any(|n| n.contains(mode)),
            "no ci/*{mode}*-values.yaml among {names:?}"
        );
    }
    assert_eq!(renders().len(), names.len() + 1);
}

#[test]
fn a_value_of_the_wrong_type_or_an_unknown_value_fails_lint() {
    let dir = scratch_dir("bad-values");
    let cases = [
        (
            "wrong-type",
            "operator:\n  replicas: two\n",
            "/operator/replicas",
        ),
        (
            "plain-key",
            "gateway:\n  tenants:\n    list:\n      - {name: a, keys: [\"my-secret-key\"]}\n",
            "/gateway/tenants/list/0/keys/0",
        ),
        ("typo", "gatway:\n  replicas: 3\n", "gatway"),
        (
            "batch-objects-not-s3",
            "gateway:\n  batch:\n    objects: gs://bucket/batches\n",
            "/gateway/batch/objects",
        ),
        (
            "redis-enabled-not-auto-or-bool",
            "redis:\n  enabled: sometimes\n",
            "/redis/enabled",
        ),
        (
            "no-memory-limit",
            "gateway:\n  resources:\n    requests: {cpu: 1, memory: 1Gi}\n    limits: {cpu: 1, memory: null}\n",
            "memory",
        ),
    ];
    for (name, text, must_mention) in cases {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
        match (Render {
            values: Some(&file),
            ..Default::default()
        })
        .lint()
        {
            Ok(out) => panic!("helm lint accepted {name}:\n{text}\n{out}"),
            Err(e) => assert!(
                e.to_string().contains(must_mention),
                "{name}: the error does not name {must_mention:?}: {e}"
            ),
        }
    }
}

#[test]
fn a_cluster_older_than_the_declared_kube_version_is_refused() {
    let version = declared_min_kube_version().unwrap_or_else(|e| panic!("{e}"));
    let minor: u32 = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("{version}"));
    let older = format!("1.{}.0", minor - 1);
    let refused = Render {
        kube_version: Some(&older),
        ..Default::default()
    }
    .template();
    assert!(
        refused.is_err_and(|e| e.to_string().contains("kubeVersion")),
        "Kubernetes {older} was accepted"
    );
}

/// Every Kubernetes minor the chart supports, as `1.M.0`: from Chart.yaml's kubeVersion to
/// the newest kubernetes-validate has schemas for (which must reach k8s-openapi's `latest`,
/// the version the typed checks use).
fn supported_kube_versions() -> Vec<String> {
    let declared = declared_min_kube_version().unwrap_or_else(|e| panic!("{e}"));
    let minor = |v: &str| -> (u32, u32) {
        let mut parts = v
            .split('.')
            .map(|p| p.parse().unwrap_or_else(|e| panic!("{v}: {e}")));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    let (oldest, newest) = (minor(&declared), minor(NEWEST_KUBE_VERSION));
    let known = kubernetes_validate_versions().unwrap_or_else(|e| panic!("{e}"));
    for needed in [oldest, newest] {
        assert!(
            known.contains(&needed),
            "kubernetes-validate has no schemas for {needed:?} (it has {known:?}); \
             scripts/setup installs a release that does"
        );
    }
    known
        .into_iter()
        .filter(|v| *v >= oldest)
        .map(|(major, minor)| format!("{major}.{minor}.0"))
        .collect()
}

#[test]
fn the_chart_and_the_crd_pass_kubernetes_validate_strict_at_every_supported_minor() {
    let versions = supported_kube_versions();
    // 1.29 (see Chart.yaml) to 1.37 at least: the range the README states.
    assert!(versions.len() >= 9, "{versions:?}");
    assert_eq!(versions.first().map(String::as_str), Some("1.29.0"));
    let crd = tokenscale_e2e::tools::workspace_root().join("crds/modeldeployments.yaml");
    let mut problems = Vec::new();
    for version in &versions {
        let dir = scratch_dir(&format!("kubernetes-validate-{version}"));
        let mut command = python_with("kubernetes_validate").unwrap_or_else(|e| panic!("{e}"));
        command.args(["-m", "kubernetes_validate", "--strict", "--quiet"]);
        command.args(["-k", version]);
        // Rendered as `helm template --kube-version` for that cluster: what it would install.
        for rendered in renders_at(version) {
            let file = dir.join(format!("{}.yaml", rendered.label));
            std::fs::write(&file, &rendered.yaml)
                .unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
            command.arg(file);
        }
        command.arg(&crd);
        let output = run(command).unwrap_or_else(|e| panic!("kubernetes-validate {version}: {e}"));
        // Only the Prometheus Operator kinds lack a bundled schema; they are typed below.
        problems.extend(
            output
                .lines()
                .filter(|l| !l.trim().is_empty())
                .filter(|l| {
                    !(l.starts_with("WARN")
                        && (l.contains("kind ServiceMonitor") || l.contains("kind PodMonitor")))
                })
                .map(|l| format!("[{version}] {l}")),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_rendered_object_parses_as_its_type_and_passes_pod_security_and_rbac() {
    let mut problems = Vec::new();
    let mut pods_checked = 0;
    for rendered in renders() {
        for object in &rendered.objects {
            let typed = match Typed::parse(object) {
                Ok(typed) => typed,
                Err(e) => {
                    problems.push(format!("[{}] {e}", rendered.label));
                    continue;
                }
            };
            if let Some(pod) = typed.pod_spec() {
                pods_checked += 1;
                problems.extend(
                    check_pod_security(&object.id(), pod)
                        .iter()
                        .map(|v| format!("[{}] {v}", rendered.label)),
                );
            }
            if let Some(rules) = typed.policy_rules() {
                problems.extend(
                    check_rbac_rules(&object.id(), rules)
                        .iter()
                        .map(|v| format!("[{}] {v}", rendered.label)),
                );
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // operator + gateway Deployments and the helm test Pod, in every render; the chart's own
    // Redis where it is on: at least with the defaults' two gateway pods and ci/redis-values.
    let has_redis = |r: &Rendered| r.of_kind("Deployment").any(|d| d.name.ends_with("-redis"));
    assert!(has_redis(default_render()) && has_redis(ci_render("redis-values.yaml")));
    let with_redis = renders().iter().filter(|r| has_redis(r)).count();
    assert_eq!(pods_checked, 3 * renders().len() + with_redis);
}
