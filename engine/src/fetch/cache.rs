//! Where cached models live, and hashing files.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{Error, Result};

/// `$XDG_CACHE_HOME/tokenscale/models`, else `$HOME/.cache/tokenscale/models`.
pub fn default_cache_dir() -> Result<PathBuf> {
    cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
        .ok_or(Error::NoCacheDir)
}

/// The cache directory for the given `XDG_CACHE_HOME` and `HOME` values (empty counts as unset,
/// as the XDG spec says).
pub fn cache_dir_from(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = set(xdg_cache_home).or_else(|| set(home).map(|h| h.join(".cache")))?;
    Some(base.join("tokenscale").join("models"))
}

/// Lower-case hex SHA-256 of a file's contents.
pub fn sha256_file(path: &Path) -> Result<String> {
    let io = |source| Error::Io {
        what: format!("hashing {}", path.display()),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
