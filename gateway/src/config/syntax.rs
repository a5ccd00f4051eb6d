//! The syntax of values the file holds and layers read: a key's hash, where batch objects go.

use std::path::PathBuf;

/// Parses `sha256:<64 hex digits>` into the hash; anything else (a plain key) is refused.
pub fn parse_key_hash(text: &str) -> Result<[u8; 32], String> {
    let Some(hex_digits) = text.strip_prefix("sha256:") else {
        return Err(
            "keys must be given as `sha256:<hex>` of the key; plain keys are refused".into(),
        );
    };
    let mut hash = [0u8; 32];
    hex::decode_to_slice(hex_digits, &mut hash)
        .map_err(|e| format!("`sha256:` must be followed by 64 hex digits ({e})"))?;
    Ok(hash)
}

/// Where the files go, as `batch.objects` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local folder.
    Dir(PathBuf),
    /// An S3-compatible bucket and a key prefix.
    S3 {
        /// The bucket.
        bucket: String,
        /// Keys start with this (no leading or trailing `/`; may be empty).
        prefix: String,
    },
}

/// Parses `s3://BUCKET[/PREFIX]` or `file:///ABSOLUTE/PATH`.
pub fn parse_location(text: &str) -> Result<Location, String> {
    if let Some(rest) = text.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("`{text}` names no bucket"));
        }
        return Ok(Location::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
        });
    }
    if let Some(path) = text.strip_prefix("file://")
        && path.starts_with('/')
    {
        return Ok(Location::Dir(PathBuf::from(path)));
    }
    Err(format!(
        "`{text}` is neither `s3://BUCKET/PREFIX` nor `file:///ABSOLUTE/PATH`"
    ))
}
