//! The external tools the chart tests run: `helm` (v4) and the PyPI `kubernetes-validate`,
//! both installed by `scripts/setup` into `.cache/tools/`, and `promtool` (Debian package).
//! A missing tool is an error that says how to install it, never a skipped test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Why a tool could not be run or what it refused.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The binary or module is not installed.
    #[error("{tool} is not installed ({looked}); run scripts/setup, which installs it")]
    Missing {
        /// The tool.
        tool: &'static str,
        /// Where it was looked for.
        looked: String,
    },
    /// The process could not start.
    #[error("cannot run {tool}: {source}")]
    Spawn {
        /// The tool.
        tool: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The tool ran and failed.
    #[error("{command} failed ({status}):\n{output}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its stdout and stderr.
        output: String,
    },
}

/// The workspace root (the folder holding `charts/`, `crds/`, `examples/`).
pub fn workspace_root() -> PathBuf {
    let tests_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests_dir.parent().unwrap_or(tests_dir).to_path_buf()
}

/// `.cache/tools`, where scripts/setup installs helm, kubectl and Python packages.
pub fn tools_dir() -> PathBuf {
    workspace_root().join(".cache/tools")
}

/// The helm binary: `$TOKENSCALE_HELM`, else `.cache/tools/bin/helm`.
pub fn helm() -> Result<PathBuf, ToolError> {
    let path = std::env::var_os("TOKENSCALE_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| tools_dir().join("bin/helm"));
    if path.is_file() {
        Ok(path)
    } else {
        Err(ToolError::Missing {
            tool: "helm",
            looked: path.display().to_string(),
        })
    }
}

/// Runs `program args`; stdout on success, a [`ToolError::Failed`] with all output otherwise.
pub fn run(mut command: Command) -> Result<String, ToolError> {
    let line = format!("{command:?}");
    let output: Output = command.output().map_err(|source| ToolError::Spawn {
        tool: line.clone(),
        source,
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(ToolError::Failed {
            command: line,
            status: output.status,
            output: format!("{stdout}{stderr}"),
        })
    }
}

/// A `python3` command with `.cache/tools/python` on `PYTHONPATH`, after checking that
/// `module` imports there.
pub fn python_with(module: &'static str) -> Result<Command, ToolError> {
    let site = tools_dir().join("python");
    let command = || {
        let mut c = Command::new("python3");
        c.env("PYTHONPATH", &site);
        c
    };
    let mut probe = command();
    probe.args(["-c", &format!("import {module}")]);
    match probe.output() {
        Ok(out) if out.status.success() => Ok(command()),
        _ => Err(ToolError::Missing {
            tool: module,
            looked: format!("python3 with PYTHONPATH={}", site.display()),
        }),
    }
}

/// The Kubernetes versions whose schemas the installed `kubernetes-validate` bundles, as
/// `(major, minor)`, oldest first (its `--kubernetes-version` accepts `MAJOR.MINOR.0` of each).
pub fn kubernetes_validate_versions() -> Result<Vec<(u32, u32)>, ToolError> {
    let mut command = python_with("kubernetes_validate")?;
    command.args([
        "-c",
        "from kubernetes_validate.utils import all_versions; print('\\n'.join(all_versions()))",
    ]);
    let out = run(command)?;
    let mut versions: Vec<(u32, u32)> = out
        .lines()
        .filter_map(|line| {
            let mut parts = line.trim().split('.');
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
        .collect();
    // Each version comes twice (its plain and its strict schemas).
    versions.sort_unstable();
    versions.dedup();
    Ok(versions)
}

/// `promtool` from `PATH` (Debian package `prometheus`).
pub fn promtool() -> Result<Command, ToolError> {
    match Command::new("promtool").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(Command::new("promtool")),
        _ => Err(ToolError::Missing {
            tool: "promtool",
            looked: "PATH".into(),
        }),
    }
}
