//! Fuzz target: what a Hub (or anything at `HF_ENDPOINT`) answers: the revision listing, the
//! choice of files from it, a safetensors index, and `hf://` sources. None may panic; a chosen
//! file is always one the listing has; an index names only plain file names; a source that
//! parses prints back to itself (less a trailing '/').
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

/// The constants the file selection reads from the engine's model module.
mod model {
    pub mod hf {
        pub const INDEX_FILE: &str = "model.safetensors.index.json";
        pub const SINGLE_FILE: &str = "model.safetensors";
    }
}

// Blob names are the cache's business, not exercised here.
#[allow(dead_code)]
#[path = "../../engine/src/fetch/hub/api.rs"]
mod api;

use tokenscale_common::hub_source::HubSource;

/// The property, for any input.
fn check(data: &[u8]) {
    if let Ok(listing) = api::parse_listing(data) {
        assert!(api::is_hex(&listing.commit, 40));
        let has = |p: &str| listing.files.iter().any(|f| f.path == p);
        match api::select(&listing, None) {
            Ok(api::Selection::Checkpoint {
                index,
                single,
                extras,
            }) => {
                assert!(index.iter().chain(&single).chain(&extras).all(|f| has(f)));
                assert!(
                    index.is_some() != single.is_some(),
                    "the index or the single file"
                );
            }
            Ok(api::Selection::File(_)) => panic!("no file was asked for"),
            Err(_) => {}
        }
        if let Some(first) = listing.files.first()
            && let Ok(api::Selection::File(f)) = api::select(&listing, Some(&first.path))
        {
            assert!(has(&f));
        }
    }
    if let Ok(shards) = api::shards_of_index(data) {
        assert!(!shards.is_empty());
        assert!(
            shards
                .iter()
                .all(|s| !s.contains('/') && !s.starts_with('.') && !s.is_empty())
        );
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Some(Ok(source)) = HubSource::parse(text)
    {
        // The printed form is canonical (a trailing '/' after the repository is dropped):
        // it parses back to the same source and prints the same.
        let printed = source.to_string();
        assert!(printed == text || text.strip_suffix('/') == Some(printed.as_str()));
        assert_eq!(
            HubSource::parse(&printed),
            Some(Ok(source.clone())),
            "round trip"
        );
        if let Some(file) = &source.file {
            assert!(!file.split('/').any(|p| p == ".." || p.is_empty()));
        }
    }
}

fuzz_main!("hub_listing");
