//! The Hub's repository listing (`GET /api/models/{repo}/revision/{rev}?blobs=true`) and the
//! choice of files a checkpoint needs from it. Pure: no I/O.

use serde::Deserialize;

/// One file of a repository at a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    /// Path inside the repository.
    pub path: String,
    /// Size in bytes, when the listing gives it.
    pub size: Option<u64>,
    /// What the content must hash to, when the listing gives it.
    pub hash: Option<Hash>,
}

/// A content hash the Hub reports for a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hash {
    /// Large files (Git LFS): SHA-256 of the content, lower-case hex.
    Sha256(String),
    /// Small files (plain Git): the blob id, SHA-1 of `"blob {size}\0" + content`.
    GitSha1(String),
}

impl Hash {
    /// The name of the file in the cache's `blobs/` folder (the Hub's ETag, as
    /// `huggingface_hub` names blobs).
    pub fn blob_name(&self) -> &str {
        match self {
            Self::Sha256(h) | Self::GitSha1(h) => h,
        }
    }
}

/// A repository at a resolved commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoListing {
    /// The commit the revision resolved to (40 hex digits).
    pub commit: String,
    pub files: Vec<RemoteFile>,
}

#[derive(Deserialize)]
struct RawInfo {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<RawSibling>,
}

#[derive(Deserialize)]
struct RawSibling {
    rfilename: String,
    size: Option<u64>,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    lfs: Option<RawLfs>,
}

#[derive(Deserialize)]
struct RawLfs {
    sha256: String,
    size: u64,
}

/// Whether `s` is lower-case (or upper-case) hex of `len` digits.
pub fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// Parses the listing's JSON; the error says what is missing.
pub fn parse_listing(body: &[u8]) -> Result<RepoListing, String> {
    let raw: RawInfo =
        serde_json::from_slice(body).map_err(|e| format!("unreadable repository listing: {e}"))?;
    let commit = raw
        .sha
        .filter(|s| is_hex(s, 40))
        .ok_or("the repository listing has no commit hash (sha)")?
        .to_ascii_lowercase();
    let files = raw
        .siblings
        .into_iter()
        .map(|s| {
            let (size, hash) = match s.lfs {
                Some(lfs) if is_hex(&lfs.sha256, 64) => (
                    Some(lfs.size),
                    Some(Hash::Sha256(lfs.sha256.to_ascii_lowercase())),
                ),
                _ => (
                    s.size,
                    s.blob_id
                        .filter(|b| is_hex(b, 40))
                        .map(|b| Hash::GitSha1(b.to_ascii_lowercase())),
                ),
            };
            RemoteFile {
                path: s.rfilename,
                size,
                hash,
            }
        })
        .collect();
    Ok(RepoListing { commit, files })
}

/// Files of a safetensors checkpoint besides the weights: required, then optional.
pub const CONFIG_FILES: &[&str] = &["config.json", "tokenizer.json"];
pub const OPTIONAL_FILES: &[&str] = &[
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
];

/// What to take from a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// One named file (a `.gguf`).
    File(String),
    /// A safetensors checkpoint: the index (if sharded) is fetched first, then
    /// [`shards_of_index`] names the weight files.
    Checkpoint {
        /// The index file, when the checkpoint is sharded.
        index: Option<String>,
        /// The single weight file, when it is not.
        single: Option<String>,
        /// Config and tokenizer files present in the repository.
        extras: Vec<String>,
    },
}

/// Why a repository cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// The named file is not in the repository; its `.gguf` files are listed.
    FileMissing { file: String, ggufs: Vec<String> },
    /// A required config file is missing.
    ConfigMissing { file: String },
    /// No safetensors weights at the top level; its `.gguf` files are listed.
    NoWeights { ggufs: Vec<String> },
}

/// Chooses the files to fetch: the named file, or a checkpoint's index or single weight file
/// plus its config and tokenizer files. Top-level files only (`original/` folders of
/// consolidated weights are never fetched).
pub fn select(listing: &RepoListing, file: Option<&str>) -> Result<Selection, SelectError> {
    let has = |p: &str| listing.files.iter().any(|f| f.path == p);
    let ggufs = || {
        listing
            .files
            .iter()
            .filter(|f| f.path.ends_with(".gguf"))
            .map(|f| f.path.clone())
            .collect::<Vec<_>>()
    };
    if let Some(file) = file {
        return match has(file) {
            true => Ok(Selection::File(file.to_string())),
            false => Err(SelectError::FileMissing {
                file: file.to_string(),
                ggufs: ggufs(),
            }),
        };
    }
    let index = has(crate::model::hf::INDEX_FILE).then(|| crate::model::hf::INDEX_FILE.to_string());
    let single =
        has(crate::model::hf::SINGLE_FILE).then(|| crate::model::hf::SINGLE_FILE.to_string());
    if index.is_none() && single.is_none() {
        return Err(SelectError::NoWeights { ggufs: ggufs() });
    }
    if let Some(missing) = CONFIG_FILES.iter().find(|f| !has(f)) {
        return Err(SelectError::ConfigMissing {
            file: missing.to_string(),
        });
    }
    let extras = CONFIG_FILES
        .iter()
        .chain(OPTIONAL_FILES)
        .filter(|f| has(f))
        .map(|f| f.to_string())
        .collect();
    // Sharded checkpoints sometimes also carry a merged copy: the index decides.
    let single = if index.is_some() { None } else { single };
    Ok(Selection::Checkpoint {
        index,
        single,
        extras,
    })
}

/// The shard files an index's `weight_map` names, in first-seen order; each must be a plain
/// top-level file name.
pub fn shards_of_index(index_json: &[u8]) -> Result<Vec<String>, String> {
    let value: serde_json::Value = serde_json::from_slice(index_json)
        .map_err(|e| format!("the safetensors index is not valid JSON: {e}"))?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or("the safetensors index has no weight_map")?;
    let mut shards: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let file = file
            .as_str()
            .filter(|f| {
                !f.is_empty() && !f.contains('/') && !f.contains('\\') && !f.starts_with('.')
            })
            .ok_or_else(|| {
                format!("the safetensors index maps {tensor} to {file}, not a file name")
            })?;
        if !shards.iter().any(|s| s == file) {
            shards.push(file.to_string());
        }
    }
    if shards.is_empty() {
        return Err("the safetensors index lists no tensors".into());
    }
    Ok(shards)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LISTING: &str = r#"{
      "id": "meta-llama/Llama-3.1-8B-Instruct",
      "sha": "0E9E39F249A16976918F6564B8830BC894C89659",
      "siblings": [
        {"rfilename": ".gitattributes", "blobId": "a6344aac8c09253b3b630fb776ae94478aa0275b", "size": 1519},
        {"rfilename": "config.json", "blobId": "0bb6fd75b3ad2fe988565929f329945262c2814e", "size": 855},
        {"rfilename": "generation_config.json", "blobId": "cc7276240d1e598ec8fdb6be8ac6d23cdf2bcf8e", "size": 184},
        {"rfilename": "model-00001-of-00004.safetensors", "blobId": "b5cc9a5ed3e2e8a9a7bd8b2aa6bfcfd1c3b9d6b5", "size": 4976698672,
         "lfs": {"sha256": "2B1879F356AED350030BB40EB45AD362C89D9891096F79A3AB323D3BA5607668", "size": 4976698672, "pointerSize": 135}},
        {"rfilename": "model.safetensors.index.json", "blobId": "0fd8120f1c6acddc268ebc2583058efaf699a771", "size": 23950},
        {"rfilename": "original/consolidated.00.pth", "blobId": "be52262c9289304f3e8240e0749bf257bc04264f", "size": 16060617592,
         "lfs": {"sha256": "be52262c9289304f3e8240e0749bf257bc04264f3e8240e0749bf257bc04264f", "size": 16060617592, "pointerSize": 136}},
        {"rfilename": "tokenizer.json", "blobId": "5cc5f00a5b203e90a27a3bd60d1ec393b07971e8", "size": 9085657},
        {"rfilename": "tokenizer_config.json", "blobId": "ab6ca6e8cb1b4bc9ad1e6ba3d4da1a5d1a5a6d3c", "size": 55351}
      ]
    }"#;

    #[test]
    fn the_listing_gives_commit_sizes_and_hashes() {
        let l = parse_listing(LISTING.as_bytes()).unwrap();
        assert_eq!(l.commit, "0e9e39f249a16976918f6564b8830bc894c89659");
        let shard = l
            .files
            .iter()
            .find(|f| f.path.starts_with("model-0"))
            .unwrap();
        assert_eq!(shard.size, Some(4_976_698_672));
        assert_eq!(
            shard.hash,
            Some(Hash::Sha256(
                "2b1879f356aed350030bb40eb45ad362c89d9891096f79a3ab323d3ba5607668".into()
            ))
        );
        let config = l.files.iter().find(|f| f.path == "config.json").unwrap();
        assert_eq!(
            config.hash,
            Some(Hash::GitSha1(
                "0bb6fd75b3ad2fe988565929f329945262c2814e".into()
            ))
        );
        assert!(
            parse_listing(b"{\"siblings\": []}")
                .unwrap_err()
                .contains("commit")
        );
        assert!(parse_listing(b"<html>").unwrap_err().contains("unreadable"));
    }

    #[test]
    fn a_checkpoint_takes_its_index_configs_and_tokenizer_never_original_weights() {
        let l = parse_listing(LISTING.as_bytes()).unwrap();
        let s = select(&l, None).unwrap();
        assert_eq!(
            s,
            Selection::Checkpoint {
                index: Some("model.safetensors.index.json".into()),
                single: None,
                extras: vec![
                    "config.json".into(),
                    "tokenizer.json".into(),
                    "tokenizer_config.json".into(),
                    "generation_config.json".into()
                ],
            }
        );
        let index = br#"{"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}"#;
        assert_eq!(
            shards_of_index(index).unwrap(),
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ]
        );
        assert!(shards_of_index(br#"{"weight_map": {"a": "../x"}}"#).is_err());
    }

    #[test]
    fn missing_files_are_named_with_the_alternatives() {
        let mut l = parse_listing(LISTING.as_bytes()).unwrap();
        assert_eq!(
            select(&l, Some("model.Q4_K_M.gguf")),
            Err(SelectError::FileMissing {
                file: "model.Q4_K_M.gguf".into(),
                ggufs: vec![]
            })
        );
        l.files.retain(|f| !f.path.starts_with("model"));
        l.files.push(RemoteFile {
            path: "m.Q4_1.gguf".into(),
            size: None,
            hash: None,
        });
        assert_eq!(
            select(&l, None),
            Err(SelectError::NoWeights {
                ggufs: vec!["m.Q4_1.gguf".into()]
            })
        );
        assert_eq!(
            select(&l, Some("m.Q4_1.gguf")),
            Ok(Selection::File("m.Q4_1.gguf".into()))
        );
        l.files.push(RemoteFile {
            path: "model.safetensors".into(),
            size: None,
            hash: None,
        });
        l.files.retain(|f| f.path != "tokenizer.json");
        assert_eq!(
            select(&l, None),
            Err(SelectError::ConfigMissing {
                file: "tokenizer.json".into()
            })
        );
    }
}
