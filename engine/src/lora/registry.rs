//! The adapters a replica serves: every registered name keeps its source, and at most
//! `--max-loras` of them keep their weights in memory; the least recently used is evicted
//! first and read again from its source on its next request. A request holds its adapter for
//! as long as it runs, so an eviction never pulls weights out from under a batch.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use tokenscale_common::hub_source::HubSource;

use super::{LoraAdapter, LoraError, LoraLimits, load_adapter};
use crate::model::ModelConfig;

/// A registered adapter, as `/v1/models` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterInfo {
    pub name: String,
    /// What it was loaded from (`--lora NAME=SOURCE`, or `lora_path`).
    pub source: String,
}

/// What a lookup by name found.
#[derive(Debug)]
pub enum Lookup {
    Loaded(Arc<LoraAdapter>),
    /// Registered, its weights evicted: [`LoraRegistry::reload`] reads them again.
    Evicted,
    Unknown,
}

#[derive(Debug)]
struct Entry {
    source: String,
    dir: PathBuf,
    loaded: Option<Arc<LoraAdapter>>,
    last_used: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<String, Entry>,
    clock: u64,
    next_id: u64,
}

/// The adapters of one replica (cheap to share behind an `Arc`).
#[derive(Debug)]
pub struct LoraRegistry {
    base: ModelConfig,
    base_name: String,
    limits: LoraLimits,
    max_loras: usize,
    /// `Some(backend)` when the backend computes no adapters: every load is refused.
    unsupported: Option<&'static str>,
    inner: Mutex<Inner>,
}

impl LoraRegistry {
    /// An empty registry for `base`, served as `base_name`.
    pub fn new(
        base: ModelConfig,
        base_name: String,
        limits: LoraLimits,
        max_loras: usize,
        unsupported: Option<&'static str>,
    ) -> Self {
        Self {
            base,
            base_name,
            limits,
            max_loras: max_loras.max(1),
            unsupported,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// `--max-loras`: adapters kept in memory at a time.
    pub fn max_loras(&self) -> usize {
        self.max_loras
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every update is one insert).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the adapter at `source` (a folder or `hf://`), checks it against the base and
    /// serves it as `name`. Blocking (file reads, maybe a download).
    pub fn load(&self, name: &str, source: &str) -> Result<Arc<LoraAdapter>, LoraError> {
        if let Some(backend) = self.unsupported {
            return Err(LoraError::Unsupported(backend));
        }
        if name.is_empty() || name == self.base_name {
            return Err(LoraError::Invalid {
                name: name.to_string(),
                reason: "an adapter needs a name of its own, not the base model's".into(),
            });
        }
        if self.lock().entries.contains_key(name) {
            return Err(LoraError::Exists(name.to_string()));
        }
        let dir = resolve(name, source)?;
        let id = self.next_id();
        let adapter = Arc::new(load_adapter(name, &dir, &self.base, self.limits, id)?);
        let mut inner = self.lock();
        if inner.entries.contains_key(name) {
            return Err(LoraError::Exists(name.to_string()));
        }
        inner.clock += 1;
        let entry = Entry {
            source: source.to_string(),
            dir,
            loaded: Some(adapter.clone()),
            last_used: inner.clock,
        };
        inner.entries.insert(name.to_string(), entry);
        evict(&mut inner, self.max_loras, name);
        Ok(adapter)
    }

    fn next_id(&self) -> u64 {
        let mut inner = self.lock();
        inner.next_id += 1;
        inner.next_id
    }

    /// Stops serving `name`; requests already running keep their weights until they end.
    pub fn unload(&self, name: &str) -> Result<(), LoraError> {
        match self.lock().entries.remove(name) {
            Some(_) => Ok(()),
            None => Err(LoraError::NotFound(name.to_string())),
        }
    }

    /// The adapter called `name`, marked as just used.
    pub fn lookup(&self, name: &str) -> Lookup {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        match inner.entries.get_mut(name) {
            None => Lookup::Unknown,
            Some(e) => {
                e.last_used = now;
                match &e.loaded {
                    Some(a) => Lookup::Loaded(a.clone()),
                    None => Lookup::Evicted,
                }
            }
        }
    }

    /// Reads an evicted adapter again from its source (evicting another if need be).
    /// Blocking.
    pub fn reload(&self, name: &str) -> Result<Arc<LoraAdapter>, LoraError> {
        let dir = match self.lock().entries.get(name) {
            Some(e) => e.dir.clone(),
            None => return Err(LoraError::NotFound(name.to_string())),
        };
        let id = self.next_id();
        let adapter = Arc::new(load_adapter(name, &dir, &self.base, self.limits, id)?);
        let mut inner = self.lock();
        let Some(entry) = inner.entries.get_mut(name) else {
            return Err(LoraError::NotFound(name.to_string()));
        };
        // Another request may have reloaded it meanwhile: keep one copy.
        let adapter = entry.loaded.get_or_insert(adapter).clone();
        evict(&mut inner, self.max_loras, name);
        Ok(adapter)
    }

    /// Every registered adapter, by name.
    pub fn list(&self) -> Vec<AdapterInfo> {
        self.lock()
            .entries
            .iter()
            .map(|(name, e)| AdapterInfo {
                name: name.clone(),
                source: e.source.clone(),
            })
            .collect()
    }

    /// Names of the adapters whose weights are in memory now.
    pub fn resident(&self) -> Vec<String> {
        self.lock()
            .entries
            .iter()
            .filter(|(_, e)| e.loaded.is_some())
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// Drops the weights of the least recently used adapters (never `keep`) beyond `max`.
fn evict(inner: &mut Inner, max: usize, keep: &str) {
    loop {
        let resident = inner
            .entries
            .values()
            .filter(|e| e.loaded.is_some())
            .count();
        if resident <= max {
            return;
        }
        let victim = inner
            .entries
            .iter_mut()
            .filter(|(n, e)| e.loaded.is_some() && n.as_str() != keep)
            .min_by_key(|(_, e)| e.last_used);
        match victim {
            Some((name, e)) => {
                tracing::info!(adapter = %name, "LoRA adapter evicted (--max-loras)");
                e.loaded = None;
            }
            None => return,
        }
    }
}

/// The folder of `source`: a local folder, or an `hf://` repository fetched into the cache.
fn resolve(name: &str, source: &str) -> Result<PathBuf, LoraError> {
    let fail = |reason: String| LoraError::Source {
        name: name.to_string(),
        source_name: source.to_string(),
        reason,
    };
    if let Some(hub) = HubSource::parse(source) {
        let hub = hub.map_err(|e| fail(e.to_string()))?;
        let config = crate::fetch::hub::HubConfig::from_env().map_err(|e| fail(e.to_string()))?;
        let snapshot = crate::fetch::hub::fetch(&hub, &config).map_err(|e| fail(e.to_string()))?;
        return Ok(snapshot.path);
    }
    let dir = PathBuf::from(source);
    if !dir.is_dir() {
        return Err(fail(
            "not a folder (a PEFT adapter folder or hf://org/repo)".into(),
        ));
    }
    Ok(dir)
}
