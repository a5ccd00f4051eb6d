//! What each replica of `up` runs for an engine kind other than ours: the program
//! (`engine.command`, else that engine's own command found on PATH) with the arguments the
//! operator renders for it, less the listen flags (each replica gets its own loopback port).
//! So the same manifest drives a local `llama-server` (or `vllm serve`) pool and a cluster.

use std::path::{Path, PathBuf};

use tokenscale_crd::children::engines;
use tokenscale_crd::{EngineKind, ModelDeployment, ModelSource};

use super::{Manifest, UpError};

/// The program and arguments of every replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The executable.
    pub bin: PathBuf,
    /// Its arguments (the listen flags are added per replica).
    pub args: Vec<String>,
}

/// The command `up` runs for `kind` when the manifest names none: that engine's own.
fn default_command(kind: EngineKind) -> &'static [&'static str] {
    match kind {
        EngineKind::Tokenscale => &["tokenscale-engine", "serve"],
        EngineKind::Vllm => &["vllm", "serve"],
        EngineKind::Sglang => &["python3", "-m", "sglang.launch_server"],
        EngineKind::Llamacpp => &["llama-server"],
    }
}

/// The replicas' program for a manifest whose `engine.kind` is not `tokenscale`.
pub fn other_engine(manifest: &Manifest) -> Result<Program, UpError> {
    let spec = &manifest.spec;
    let kind = spec.engine.kind;
    let source =
        ModelSource::parse(&spec.model.source).map_err(|e| UpError::Manifest(e.to_string()))?;
    if matches!(source, ModelSource::Pvc { .. }) {
        return Err(UpError::Manifest(format!(
            "model.source {source}: tokenscale up reads file:// paths and hf:// sources"
        )));
    }
    let md = ModelDeployment::new(&manifest.metadata.name, spec.clone());
    let process = engines::render(&md, &source).map_err(|e| UpError::Manifest(e.to_string()))?;
    let command = match &spec.engine.command {
        Some(command) => command.clone(),
        None => default_command(kind)
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let (program, leading) = command
        .split_first()
        .ok_or_else(|| UpError::Manifest("engine.command is empty".into()))?;
    let bin = find_program(program).ok_or_else(|| {
        UpError::EngineBinary(format!(
            "{program} ({} for engine.kind {kind}; set engine.command to its path)",
            kind.display_name()
        ))
    })?;
    let mut args = leading.to_vec();
    args.extend(without_listen_flags(&process.args));
    Ok(Program { bin, args })
}

/// `args` without `--host H` and `--port P`: `up` gives each replica its own.
pub fn without_listen_flags(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        if arg == "--host" || arg == "--port" {
            skip_value = true;
            continue;
        }
        out.push(arg.clone());
    }
    out
}

/// `name` as given when it holds a `/`, else the first match on `PATH`.
fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let path = PathBuf::from(name);
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LLAMACPP: &str = "apiVersion: tokenscale.dev/v1alpha1\nkind: ModelDeployment\n\
        metadata: {name: small}\nspec:\n  model: {source: \"file:///models/m.gguf\", \
        servedName: smol}\n  engine: {kind: llamacpp, backend: cpu, command: [\"/bin/sh\"], \
        maxNumSeqs: 2, args: [\"--threads\", \"1\"]}\n  replicas: {min: 1, max: 2}\n  \
        slo: {ttftP95: 2s, tpotP95: 200ms}\n";

    #[test]
    fn the_operators_arguments_without_the_listen_flags() {
        let manifest = Manifest::parse(LLAMACPP).unwrap();
        let program = other_engine(&manifest).unwrap();
        assert_eq!(program.bin, PathBuf::from("/bin/sh"));
        assert_eq!(
            program.args.join(" "),
            "--model /models/m.gguf --alias smol --metrics --parallel 2 --threads 1"
        );
    }

    #[test]
    fn a_missing_program_names_the_engine_and_the_field() {
        let manifest =
            Manifest::parse(&LLAMACPP.replace("\"/bin/sh\"", "\"no-such-llama-server\"")).unwrap();
        let e = other_engine(&manifest).unwrap_err().to_string();
        assert!(
            e.contains("no-such-llama-server (llama.cpp for engine.kind llamacpp"),
            "{e}"
        );
    }
}
