//! `hf://` fetching against a local Hub (`hub_support`: the Hub's listing and resolve routes,
//! ETag and commit headers, ranges, a CDN on another port): a pull fetches and caches in the
//! Hugging Face layout, a second pull downloads nothing, a cut download resumes, revisions
//! pin, a gated model gets the 401/403 messages, a missing repository, revision or file the
//! 404 message, a corrupted file is caught, and a cached model serves when the Hub is away.

#![allow(clippy::unwrap_used)]

mod checkpoints_support;
mod hub_support;

use std::path::{Path, PathBuf};

use checkpoints_support::tiny_models;
use hub_support::{Access, TestHub};
use tokenscale_common::hub_source::HubSource;
use tokenscale_engine::fetch::Error;
use tokenscale_engine::fetch::hub::{HubConfig, Snapshot, fetch};
use tokenscale_scratch::{Scratch, scratch};

const ORG: &str = "test-org";

/// A Hub serving the tiny checkpoints as `test-org/NAME`, a `@v1` revision of `qwen3` whose
/// config differs, and a GGUF-only repository.
fn hub(label: &str) -> (TestHub, PathBuf, Scratch) {
    let root = scratch!(&format!("hub-{label}"));
    let org = root.join(ORG);
    std::fs::create_dir_all(&org).unwrap();
    for name in ["qwen3", "llama31", "qwen2"] {
        std::os::unix::fs::symlink(tiny_models().join(name), org.join(name)).unwrap();
    }
    let v1 = org.join("qwen3@v1");
    std::fs::create_dir_all(&v1).unwrap();
    for e in std::fs::read_dir(tiny_models().join("qwen3")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), v1.join(e.file_name())).unwrap();
    }
    let config = std::fs::read_to_string(v1.join("config.json")).unwrap();
    std::fs::write(
        v1.join("config.json"),
        config.replace("\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 1e-05"),
    )
    .unwrap();
    let gguf = org.join("tiny-GGUF");
    std::fs::create_dir_all(&gguf).unwrap();
    std::fs::write(gguf.join("tiny.Q8_0.gguf"), vec![7u8; 300_000]).unwrap();
    std::fs::write(gguf.join("README.md"), "a GGUF repository\n").unwrap();
    let cache = root.join("cache");
    (TestHub::start(root.path()), cache, root)
}

fn config(hub: &TestHub, cache: &Path, token: Option<&str>) -> HubConfig {
    HubConfig {
        endpoint: hub.endpoint(),
        token: token.map(str::to_string),
        cache_dir: cache.to_path_buf(),
        offline: false,
        quiet: true,
        connections: 4,
    }
}

fn source(text: &str) -> HubSource {
    HubSource::parse(text).unwrap().unwrap()
}

fn pull(hub: &TestHub, cache: &Path, text: &str) -> Result<Snapshot, Error> {
    fetch(&source(text), &config(hub, cache, None))
}

#[test]
fn a_pull_fetches_into_the_hugging_face_cache_and_a_second_pull_downloads_nothing() {
    let (hub, cache, _root) = hub("pull");
    let s = pull(&hub, &cache, "hf://test-org/qwen3").unwrap();
    let repo = cache.join("models--test-org--qwen3");
    assert_eq!(s.dir, repo.join("snapshots").join(&s.commit));
    assert_eq!(s.path, s.dir);
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        s.commit
    );
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        let link = s.dir.join(file);
        let target = std::fs::read_link(&link).unwrap();
        assert!(
            target.starts_with("../../blobs"),
            "{file} links into blobs: {}",
            target.display()
        );
        assert_eq!(
            std::fs::read(&link).unwrap(),
            std::fs::read(tiny_models().join("qwen3").join(file)).unwrap()
        );
    }
    assert_eq!(hub.downloads(), 5, "{:?}", hub.seen());
    let weights = hub
        .seen()
        .into_iter()
        .find(|s| s.path.starts_with("/lfs/"))
        .unwrap();
    assert!(weights.cdn, "LFS files come from the CDN");
    assert!(s.downloaded_bytes > 0);
    // The engine opens what was fetched.
    let checkpoint = tokenscale_engine::model::Checkpoint::open(&s.path).unwrap();
    assert_eq!(checkpoint.config().unwrap().architecture, "qwen3");

    hub.clear_seen();
    let again = pull(&hub, &cache, "hf://test-org/qwen3").unwrap();
    assert_eq!(
        again,
        Snapshot {
            downloaded_bytes: 0,
            ..s
        }
    );
    assert_eq!(hub.downloads(), 0, "{:?}", hub.seen());
    assert_eq!(
        hub.seen().len(),
        1,
        "only the revision listing: {:?}",
        hub.seen()
    );
}

#[test]
fn a_cut_download_resumes_where_it_stopped() {
    let (hub, cache, _root) = hub("cut");
    let size = std::fs::metadata(tiny_models().join("llama31/model.safetensors"))
        .unwrap()
        .len();
    let cut = size / 2;
    hub.cut_once("model.safetensors", cut);
    let s = pull(&hub, &cache, "hf://test-org/llama31").unwrap();
    let weights: Vec<_> = hub
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/lfs/"))
        .collect();
    assert_eq!(weights.len(), 2, "{weights:?}");
    assert_eq!((weights[0].range_from, weights[0].body_bytes), (None, cut));
    assert_eq!(
        (weights[1].range_from, weights[1].body_bytes),
        (Some(cut), size - cut)
    );
    assert_eq!(
        std::fs::read(s.dir.join("model.safetensors")).unwrap(),
        std::fs::read(tiny_models().join("llama31/model.safetensors")).unwrap()
    );
}

#[test]
fn a_partial_download_left_by_an_earlier_run_is_resumed() {
    let (hub, cache, _root) = hub("partial");
    let original =
        std::fs::read(tiny_models().join("qwen2/model-00001-of-00002.safetensors")).unwrap();
    let sha = sha256(&original);
    let blobs = cache.join("models--test-org--qwen2/blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let kept = original.len() / 3;
    std::fs::write(blobs.join(format!("{sha}.incomplete")), &original[..kept]).unwrap();
    let s = pull(&hub, &cache, "hf://test-org/qwen2").unwrap();
    let shard = hub
        .seen()
        .into_iter()
        .find(|s| s.path == format!("/lfs/{sha}"))
        .unwrap();
    assert_eq!(shard.range_from, Some(kept as u64));
    assert_eq!(shard.body_bytes, (original.len() - kept) as u64);
    assert_eq!(
        std::fs::read(s.dir.join("model-00001-of-00002.safetensors")).unwrap(),
        original
    );
    assert!(!blobs.join(format!("{sha}.incomplete")).exists());
    // Both shards of the index, nothing else of its weights.
    assert!(s.dir.join("model-00002-of-00002.safetensors").is_file());
}

#[test]
fn revisions_pin_and_resolve_to_their_commits() {
    let (hub, cache, _root) = hub("revision");
    let main = pull(&hub, &cache, "hf://test-org/qwen3").unwrap();
    let v1 = pull(&hub, &cache, "hf://test-org/qwen3@v1").unwrap();
    assert_ne!(main.commit, v1.commit);
    let config = std::fs::read_to_string(v1.path.join("config.json")).unwrap();
    assert!(config.contains("1e-05"));
    let repo = cache.join("models--test-org--qwen3");
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/v1")).unwrap(),
        v1.commit
    );
    // The blobs the revisions share are stored once.
    let blobs = std::fs::read_dir(repo.join("blobs")).unwrap().count();
    assert_eq!(blobs, 6, "5 files of main + the changed config of v1");
    // A commit hash pins exactly.
    let pinned = pull(
        &hub,
        &cache,
        &format!("hf://test-org/qwen3@{}", main.commit),
    )
    .unwrap();
    assert_eq!(pinned.path, main.path);
}

#[test]
fn a_gguf_repository_takes_only_the_named_file() {
    let (hub, cache, _root) = hub("gguf");
    let s = pull(&hub, &cache, "hf://test-org/tiny-GGUF/tiny.Q8_0.gguf").unwrap();
    assert_eq!(s.path, s.dir.join("tiny.Q8_0.gguf"));
    assert_eq!(std::fs::read(&s.path).unwrap(), vec![7u8; 300_000]);
    assert!(!s.dir.join("README.md").exists());
    let err = pull(&hub, &cache, "hf://test-org/tiny-GGUF")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("it has GGUF files (tiny.Q8_0.gguf)")
            && err.contains("hf://test-org/tiny-GGUF/tiny.Q8_0.gguf"),
        "{err}"
    );
}

#[test]
fn gated_models_get_the_401_and_403_messages_and_the_cdn_never_sees_the_token() {
    let (hub, cache, _root) = hub("gated");
    hub.set_access(Access::Gated("hf_good".into()));
    let err = fetch(&source("hf://test-org/qwen3"), &config(&hub, &cache, None)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::HubDenied {
                status: 401,
                token_set: false,
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with("hf://test-org/qwen3: ")
            && text.contains("gated or private")
            && text.contains("set HF_TOKEN"),
        "{text}"
    );
    let err = fetch(
        &source("hf://test-org/qwen3"),
        &config(&hub, &cache, Some("hf_other")),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::HubDenied {
                status: 403,
                token_set: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("accept the model's terms"),
        "{err}"
    );
    hub.clear_seen();
    let s = fetch(
        &source("hf://test-org/qwen3"),
        &config(&hub, &cache, Some("hf_good")),
    )
    .unwrap();
    assert!(s.path.join("model.safetensors").is_file());
    let seen = hub.seen();
    assert!(
        seen.iter().filter(|s| !s.cdn).all(|s| s.authorization),
        "the Hub gets the token"
    );
    assert!(
        seen.iter().any(|s| s.cdn) && seen.iter().filter(|s| s.cdn).all(|s| !s.authorization),
        "the CDN never does"
    );
}

#[test]
fn missing_repositories_revisions_and_files_get_the_404_message() {
    let (hub, cache, _root) = hub("missing");
    let cases = [
        (
            "hf://test-org/nope",
            "repository test-org/nope was not found on the Hub (404)",
        ),
        (
            "hf://test-org/qwen3@v9",
            "revision of hf://test-org/qwen3@v9 was not found on the Hub (404)",
        ),
        (
            "hf://test-org/tiny-GGUF/other.gguf",
            "file other.gguf in hf://test-org/tiny-GGUF/other.gguf (its GGUF files: tiny.Q8_0.gguf) was not found",
        ),
    ];
    for (text, want) in cases {
        let err = pull(&hub, &cache, text).unwrap_err();
        assert!(
            matches!(err, Error::HubNotFound { .. }) && err.to_string().contains(want),
            "{text}: {err}"
        );
    }
}

#[test]
fn a_corrupted_file_is_detected_and_never_cached() {
    let (hub, cache, _root) = hub("corrupt");
    hub.corrupt("model.safetensors");
    let err = pull(&hub, &cache, "hf://test-org/qwen3").unwrap_err();
    assert!(matches!(err, Error::Integrity { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("model.safetensors is corrupted: SHA-256 is") && text.contains("discarded"),
        "{text}"
    );
    let blobs: Vec<String> = std::fs::read_dir(cache.join("models--test-org--qwen3/blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let sha = sha256(&std::fs::read(tiny_models().join("qwen3/model.safetensors")).unwrap());
    assert!(
        !blobs.iter().any(|b| b.starts_with(&sha)),
        "nothing of the weights stays: {blobs:?}"
    );
}

#[test]
fn a_cached_model_serves_offline_and_when_the_hub_is_unreachable() {
    let (hub, cache, _root) = hub("offline");
    let s = pull(&hub, &cache, "hf://test-org/qwen3").unwrap();
    let mut offline = config(&hub, &cache, None);
    offline.offline = true;
    assert_eq!(
        fetch(&source("hf://test-org/qwen3"), &offline)
            .unwrap()
            .path,
        s.path
    );
    let err = fetch(&source("hf://test-org/llama31"), &offline).unwrap_err();
    assert!(
        matches!(err, Error::Offline { .. }) && err.to_string().contains("HF_HUB_OFFLINE"),
        "{err}"
    );
    let mut away = config(&hub, &cache, None);
    away.endpoint = "http://127.0.0.1:9".into(); // discard port: nothing listens
    assert_eq!(
        fetch(&source("hf://test-org/qwen3"), &away).unwrap().path,
        s.path
    );
    let err = fetch(&source("hf://test-org/llama31"), &away)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the Hub is unreachable"), "{err}");
}

#[test]
fn the_environment_configures_endpoint_token_and_cache() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| std::ffi::OsString::from(v))
        }
    };
    let c = HubConfig::with_env(&env(&[
        ("HF_HOME", "/h"),
        ("HF_ENDPOINT", "http://mirror:8080/"),
        ("HF_TOKEN", "hf_x"),
    ]))
    .unwrap();
    assert_eq!(
        (
            c.endpoint.as_str(),
            c.token.as_deref(),
            c.cache_dir.as_path()
        ),
        ("http://mirror:8080", Some("hf_x"), Path::new("/h/hub"))
    );
    let c = HubConfig::with_env(&env(&[("HOME", "/u"), ("HF_HUB_OFFLINE", "1")])).unwrap();
    assert_eq!(c.endpoint, "https://huggingface.co");
    assert!(c.offline && c.token.is_none());
    assert_eq!(c.connections, 4, "four ranged connections by default");
    let c = HubConfig::with_env(&env(&[("HOME", "/u"), ("TOKENSCALE_HUB_CONNECTIONS", "8")]));
    assert_eq!(c.unwrap().connections, 8);
    let err = HubConfig::with_env(&env(&[("HOME", "/u"), ("TOKENSCALE_HUB_CONNECTIONS", "0")]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "TOKENSCALE_HUB_CONNECTIONS=\"0\" is not valid: expected a whole number from 1 to 32"
    );
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
