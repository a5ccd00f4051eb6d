//! Safetensors shards, memory-mapped: one file (`model.safetensors`) or the set listed by
//! `model.safetensors.index.json`. Tensors are indexed once at open; their bytes stay in the
//! maps (shared with the weights, which use bf16/f16/f32 rows in place).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::tensors::{DType, SharedBytes, TensorSource, TensorView, Weight};
use crate::{Error, Result};

/// The single-file checkpoint's name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The sharded checkpoint's index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Where one tensor lies.
#[derive(Debug, Clone)]
struct Entry {
    shard: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// Byte range inside the shard's map.
    range: std::ops::Range<usize>,
}

/// The mapped shards of a checkpoint and an index of their tensors.
pub struct Shards {
    files: Vec<PathBuf>,
    maps: Vec<Arc<memmap2::Mmap>>,
    tensors: HashMap<String, Entry>,
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards")
            .field("files", &self.files)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl Shards {
    /// Opens the shards of the checkpoint in `dir`: those the index names, else the single
    /// file. Every tensor name the index lists must be in the shard it names.
    pub fn open(dir: &Path) -> Result<Self> {
        let index = dir.join(INDEX_FILE);
        let (files, expected) = if index.is_file() {
            let (files, map) = read_index(&index)?;
            (files, Some(map))
        } else if dir.join(SINGLE_FILE).is_file() {
            (vec![SINGLE_FILE.to_string()], None)
        } else {
            return Err(Error::Model(format!(
                "{} has neither {SINGLE_FILE} nor {INDEX_FILE}",
                dir.display()
            )));
        };
        let mut shards = Shards {
            files: Vec::new(),
            maps: Vec::new(),
            tensors: HashMap::new(),
        };
        for file in &files {
            shards.add(&dir.join(file))?;
        }
        if let Some(expected) = expected {
            for (name, file) in expected {
                let found = shards.tensors.get(&name).map(|e| &shards.files[e.shard]);
                if found.and_then(|p| p.file_name()).and_then(|n| n.to_str()) != Some(&file) {
                    return Err(Error::Model(format!(
                        "{INDEX_FILE} puts tensor {name} in {file}, which does not hold it"
                    )));
                }
            }
        }
        Ok(shards)
    }

    /// Maps one shard and indexes its tensors.
    fn add(&mut self, path: &Path) -> Result<()> {
        let io = |source| Error::Io {
            what: format!("opening {}", path.display()),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private. A checkpoint rewritten in place while it is
        // served would be undefined behaviour; the fetch writes files under temporary names
        // and renames them, and never modifies a file in place (as for GGUF files).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let shard = self.maps.len();
        let entries = {
            let parsed = safetensors::SafeTensors::deserialize(&map).map_err(|e| {
                Error::Model(format!(
                    "{} is not a valid safetensors file: {e}",
                    path.display()
                ))
            })?;
            let base = map.as_ptr() as usize;
            let mut entries = Vec::new();
            for (name, view) in parsed.tensors() {
                let dtype = match view.dtype() {
                    safetensors::Dtype::F32 => DType::F32,
                    safetensors::Dtype::F16 => DType::F16,
                    safetensors::Dtype::BF16 => DType::BF16,
                    other => {
                        // Only an error if the model needs it (checked at lookup).
                        tracing::debug!(tensor = %name, dtype = ?other, "tensor of an unused type");
                        continue;
                    }
                };
                let start = view.data().as_ptr() as usize - base;
                let range = start..start + view.data().len();
                entries.push((
                    name,
                    Entry {
                        shard,
                        dtype,
                        shape: view.shape().to_vec(),
                        range,
                    },
                ));
            }
            entries
        };
        for (name, entry) in entries {
            if self.tensors.insert(name.clone(), entry).is_some() {
                return Err(Error::Model(format!(
                    "tensor {name} appears in more than one shard ({})",
                    path.display()
                )));
            }
        }
        self.files.push(path.to_path_buf());
        self.maps.push(Arc::new(map));
        Ok(())
    }

    /// Bytes of every shard (the checkpoint's size).
    pub fn byte_len(&self) -> usize {
        self.maps.iter().map(|m| m.len()).sum()
    }

    /// The view of the tensor called `name`, if any.
    pub fn get(&self, name: &str) -> Option<TensorView<'_>> {
        let e = self.tensors.get(name)?;
        let map = &self.maps[e.shard];
        let shared: SharedBytes = map.clone();
        Some(TensorView {
            name: name.to_string(),
            dtype: e.dtype,
            dims: e.shape.clone(),
            bytes: &map[e.range.clone()],
            shared: Some((shared, e.range.clone())),
        })
    }
}

/// Shard file names (in first-seen order) and the tensor → file map of an index file.
fn read_index(path: &Path) -> Result<(Vec<String>, HashMap<String, String>)> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        what: format!("reading {}", path.display()),
        source,
    })?;
    let bad = |why: &str| Error::Model(format!("{INDEX_FILE}: {why}"));
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(&format!("not valid JSON: {e}")))?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("weight_map is missing"))?;
    let mut files: Vec<String> = Vec::new();
    let mut out = HashMap::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .filter(|f| !f.contains('/') && !f.contains('\\') && !f.starts_with('.'))
            .ok_or_else(|| bad(&format!("{name} maps to {file}, not a file name")))?;
        if !files.iter().any(|f| f == file) {
            files.push(file.to_string());
        }
        out.insert(name.clone(), file.to_string());
    }
    Ok((files, out))
}

impl TensorSource for Shards {
    fn tensor(&self, weight: Weight) -> Result<Option<TensorView<'_>>> {
        let name = weight.hf_name();
        if let Some(view) = self.get(&name) {
            return Ok(Some(view));
        }
        // Present but of a type this engine cannot compute with (I8, F8, ...).
        if self.has_unsupported(&name) {
            return Err(Error::Model(format!(
                "tensor {name} has a type this engine does not compute with (supported: F32, \
                 F16, BF16)"
            )));
        }
        Ok(None)
    }

    fn name_of(&self, weight: Weight) -> String {
        weight.hf_name()
    }
}

impl Shards {
    /// Whether `name` is in some shard with an unsupported type (re-reads the headers; only
    /// on the error path).
    fn has_unsupported(&self, name: &str) -> bool {
        self.maps.iter().any(|m| {
            safetensors::SafeTensors::deserialize(m)
                .ok()
                .is_some_and(|s| s.tensor(name).is_ok())
        })
    }
}
