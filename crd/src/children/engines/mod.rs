//! One renderer per engine kind: the program, its arguments, health and metrics routes and
//! what the pod must give it, the way that engine's own documentation deploys it. The
//! Deployment builder (`deployment.rs`) wraps whichever one in the same hardened pod (security
//! context, resources, model volumes and cache, Hub token, drain), so only this differs.

mod llamacpp;
mod sglang;
mod tokenscale;
mod vllm;

use super::{ChildError, ENGINE_PORT};
use crate::{EngineKind, ModelDeployment, ModelSource};
use tokenscale_common::engines::{PriorityRender, render_flags};

pub use tokenscale::engine_args;

/// Where the model is, in the terms every engine takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelLocation {
    /// A path inside the container (an image path, or the model claim's mount).
    Path(String),
    /// A Hugging Face repository the engine downloads itself, at a revision, optionally one
    /// file of it.
    Hub {
        /// `org/repo`.
        repo: String,
        /// A branch, tag or commit; the engine's default branch when `None`.
        revision: Option<String>,
        /// One file (a `.gguf`), when named.
        file: Option<String>,
    },
    /// A name only tokenscale's engine resolves (its test and bundled models).
    Alias(String),
}

/// The model location for `kind`, or why that engine cannot load `source` (a clear message
/// for the `model.source` field; validation and the renderers share it).
pub fn model_location(kind: EngineKind, source: &ModelSource) -> Result<ModelLocation, String> {
    let location = match source {
        ModelSource::File { .. } | ModelSource::Pvc { .. } => {
            ModelLocation::Path(super::deployment::model_argument(source))
        }
        ModelSource::HuggingFace(hub) => ModelLocation::Hub {
            repo: hub.repo.clone(),
            revision: hub.revision.clone(),
            file: hub.file.clone(),
        },
        ModelSource::Alias(name) => ModelLocation::Alias(name.clone()),
    };
    let engine = kind.display_name();
    match (&location, kind) {
        (ModelLocation::Alias(name), kind) if kind != EngineKind::Tokenscale => Err(format!(
            "{name:?} is an alias only tokenscale's engine resolves; {engine} needs hf://ORG/REPO, \
             pvc://CLAIM/PATH or file:///PATH"
        )),
        (
            ModelLocation::Hub {
                file: Some(file), ..
            },
            EngineKind::Vllm | EngineKind::Sglang,
        ) => Err(format!(
            "{engine} downloads whole repositories, not one file ({file}): name the repository \
             (hf://ORG/REPO), or put a GGUF file on a claim (pvc://CLAIM/{file})"
        )),
        (
            ModelLocation::Hub {
                revision: Some(revision),
                ..
            },
            EngineKind::Llamacpp,
        ) => Err(format!(
            "llama.cpp's --hf-repo cannot pin a revision ({revision}): drop @{revision}, or put \
             the file on a claim (pvc://CLAIM/PATH)"
        )),
        _ => Ok(location),
    }
}

/// What one engine kind puts in the pod.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineProcess {
    /// The container's command: the kind's program, or `engine.command`.
    pub command: Vec<String>,
    /// Its arguments: the operator's, then `engine.args`.
    pub args: Vec<String>,
    /// The route that answers 200 once the model is loaded.
    pub health_path: &'static str,
    /// The route of the Prometheus text (on the same port).
    pub metrics_path: &'static str,
    /// Size of a memory-backed `/dev/shm`, when the engine needs more than the runtime's 64 MiB
    /// (NCCL between tensor-parallel ranks, tensors passed between the engine's processes).
    pub shared_memory: Option<&'static str>,
    /// True when the engine finishes its running requests itself on SIGTERM (ours). For the
    /// others the pod's pre-stop hook waits out the drain while the pod, already out of the
    /// Service, finishes its streams, and SIGTERM comes after.
    pub drains_on_sigterm: bool,
    /// Startup-probe failures (10 s apart) before a loading replica is restarted: the longest
    /// a download plus load may take.
    pub startup_failures: i32,
    /// Environment variables that put the engine's compile and kernel caches under the model
    /// cache volume, as `(name, folder under the cache mount)`: with a shared cache claim (or
    /// a node-local one) a new replica loads the graphs and kernels an earlier one compiled
    /// instead of compiling them again (minutes on a large model). Set before `engine.env`,
    /// which may override them.
    pub cache_env: &'static [(&'static str, &'static str)],
}

/// Triton's kernels and TorchInductor's compiled graphs: both default to the home folder or
/// `/tmp`, which every new pod starts without.
const TORCH_CACHES: [(&str, &str); 2] = [
    ("TRITON_CACHE_DIR", "triton"),
    ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
];

/// The container of `md`'s replicas for its `engine.kind`.
pub fn render(md: &ModelDeployment, source: &ModelSource) -> Result<EngineProcess, ChildError> {
    let kind = md.spec.engine.kind;
    let location = model_location(kind, source).map_err(ChildError::InvalidSpec)?;
    let mut process = match kind {
        EngineKind::Tokenscale => tokenscale::render(md, source),
        EngineKind::Vllm => vllm::render(md, &location),
        EngineKind::Sglang => sglang::render(md, &location),
        EngineKind::Llamacpp => llamacpp::render(md, &location),
    };
    if let Some(command) = &md.spec.engine.command {
        process.command = command.clone();
    }
    // Before the spec's own flags, which `priority` has read and left the last word.
    process
        .args
        .extend(priority(md).flags.iter().map(|f| f.to_string()));
    process.args.extend(md.spec.engine.args.iter().cloned());
    Ok(process)
}

/// How `md`'s engine learns a request's class: the flags that turn its priority scheduling
/// on (none where its version lacks it, or the spec chose), and the outcome in words (the
/// Deployment's `tokenscale.dev/priority` annotation). The gateway's discovery reads the
/// same spec through the same rules, so it sends the class the way the replicas take it.
pub fn priority(md: &ModelDeployment) -> PriorityRender {
    let engine = &md.spec.engine;
    render_flags(engine.kind, Some(engine.image()), &engine.args)
}

/// Builds an argument list: flags always given, then flags whose value the spec may leave
/// unset.
#[derive(Debug, Default)]
struct Args(Vec<String>);

impl Args {
    fn new<const N: usize>(items: [&str; N]) -> Self {
        Self(items.iter().map(|s| s.to_string()).collect())
    }

    fn flag(&mut self, flag: &str, value: impl ToString) -> &mut Self {
        self.0.extend([flag.to_string(), value.to_string()]);
        self
    }

    fn optional(&mut self, flag: &str, value: Option<impl ToString>) -> &mut Self {
        if let Some(value) = value {
            self.flag(flag, value);
        }
        self
    }

    fn switch(&mut self, flag: &str) -> &mut Self {
        self.0.push(flag.to_string());
        self
    }

    fn listen(&mut self) -> &mut Self {
        self.flag("--host", "0.0.0.0").flag("--port", ENGINE_PORT)
    }

    fn into_vec(self) -> Vec<String> {
        self.0
    }
}

#[cfg(test)]
mod tests;
