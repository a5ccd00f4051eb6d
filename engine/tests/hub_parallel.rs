//! Large `hf://` files over several ranged connections, against the local Hub (`hub_support`):
//! a 1 GiB file (256 MiB on a small disk) arrives byte-exact over four connections, a pull
//! killed half-way resumes and fetches only the parts it had not finished, a part cut within a
//! run resumes from its byte, a server that ignores ranges is read as one stream, and one whose
//! lengths do not add up, or that never sends a range's body, is an error that leaves no file;
//! the shards of a checkpoint download at once. Prints MiB/s with 1 and 4
//! connections (measured, never asserted).

#![allow(clippy::unwrap_used)]

mod hub_support;

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use hub_support::{Ranges, TestHub};
use tokenscale_common::hub_source::HubSource;
use tokenscale_engine::fetch::Error;
use tokenscale_engine::fetch::hub::{HubConfig, Snapshot, fetch};
use tokenscale_scratch::{Scratch, scratch};

/// A repository holding one large LFS file (`.gguf`: served from the CDN, SHA-256 checked).
const SOURCE: &str = "hf://test-org/big/big.gguf";
/// Just above the size from which files go in parts.
const SMALL_LARGE_FILE: u64 = 72 << 20;

/// Writes `size` bytes of a seeded generator (splitmix64) to `path`.
fn write_seeded(path: &Path, size: u64, seed: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut state = seed;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for word in buf.chunks_exact_mut(8) {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            word.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        let n = left.min(buf.len() as u64) as usize;
        out.write_all(&buf[..n]).unwrap();
        left -= n as u64;
    }
    out.flush().unwrap();
}

/// Whether two files hold the same bytes (read a MiB at a time: they may be 1 GiB).
fn same_bytes(a: &Path, b: &Path) -> bool {
    let (mut a, mut b) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = a.read(&mut x).unwrap();
        if n == 0 {
            return b.read(&mut y).unwrap() == 0;
        }
        if b.read_exact(&mut y[..n]).is_err() || x[..n] != y[..n] {
            return false;
        }
    }
}

/// A Hub serving a `size`-byte file as [`SOURCE`]; returns it, the file and the folder.
fn hub_with_file(label: &str, size: u64) -> (TestHub, std::path::PathBuf, Scratch) {
    let root = scratch!(label);
    let file = root.join("test-org/big/big.gguf");
    write_seeded(&file, size, 41);
    (TestHub::start(root.path()), file, root)
}

fn config(hub: &TestHub, cache: &Path, connections: usize) -> HubConfig {
    HubConfig {
        endpoint: hub.endpoint(),
        token: None,
        cache_dir: cache.to_path_buf(),
        offline: false,
        quiet: true,
        connections,
    }
}

fn pull(hub: &TestHub, cache: &Path, connections: usize) -> Result<Snapshot, Error> {
    let source = HubSource::parse(SOURCE).unwrap().unwrap();
    fetch(&source, &config(hub, cache, connections))
}

/// Files left in the cache's `blobs/` folder.
fn blobs(cache: &Path) -> Vec<String> {
    std::fs::read_dir(cache.join("models--test-org--big/blobs"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// 1 GiB when the disk has room for the file and three copies of it, else 256 MiB.
fn large_size(dir: &Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["-Pk"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let free_kib: u64 = text
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if free_kib >= 4 << 20 {
        1 << 30
    } else {
        println!(
            "only {} MiB free under {}: the large file is 256 MiB, not 1 GiB",
            free_kib >> 10,
            dir.display()
        );
        256 << 20
    }
}

#[test]
fn a_large_file_over_four_connections_is_byte_exact_and_a_killed_pull_resumes() {
    let size = large_size(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let (hub, file, root) = hub_with_file("hub-large", size);
    hub.rendezvous(2);

    // A pull in its own process, killed (SIGKILL) once half the file has been sent.
    let cache = root.join("cache-killed");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tokenscale-engine"))
        .args(["pull", SOURCE, "--hub-connections", "4"])
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HUB_CACHE", &cache)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while hub.sent_bytes() < size / 2 && started.elapsed() < Duration::from_secs(300) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the pull ended before half the file was sent"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The Hub's side of the dropped connections stops sending.
    std::thread::sleep(Duration::from_millis(500));
    let sent_before = hub.sent_bytes();
    assert!(
        sent_before >= size / 2 && sent_before < size,
        "{sent_before}"
    );
    assert!(
        blobs(&cache).iter().any(|b| b.ends_with(".parted.done")),
        "the killed pull left its ledger: {:?}",
        blobs(&cache)
    );

    // The next pull fetches only what the killed one had not finished.
    let resumed = pull(&hub, &cache, 4).unwrap();
    let refetched = hub.sent_bytes() - sent_before;
    println!(
        "killed after {} MiB sent; the resumed pull fetched {} MiB of {} MiB",
        sent_before >> 20,
        refetched >> 20,
        size >> 20
    );
    assert!(refetched < size, "{refetched} of {size} fetched again");
    assert_eq!(resumed.downloaded_bytes, refetched);
    assert!(
        same_bytes(&resumed.path, &file),
        "the resumed file is byte-exact"
    );
    let left = blobs(&cache);
    assert!(
        left.len() == 1 && !left[0].contains('.'),
        "only the verified blob stays: {left:?}"
    );
    std::fs::remove_dir_all(&cache).unwrap();

    // The figure: the same file with 1 and 4 connections, one after the other.
    let mut figures = Vec::new();
    for connections in [1, 4] {
        let cache = root.join(format!("cache-{connections}"));
        let (sent, started) = (hub.sent_bytes(), Instant::now());
        let s = pull(&hub, &cache, connections).unwrap();
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(hub.sent_bytes() - sent, size, "{connections} connection(s)");
        assert!(same_bytes(&s.path, &file), "{connections} connection(s)");
        figures.push(format!(
            "{connections} connection(s): {:.0} MiB/s ({:.2} s)",
            (size >> 20) as f64 / secs,
            secs
        ));
        std::fs::remove_dir_all(&cache).unwrap();
    }
    assert!(hub.max_in_flight() >= 2, "parts went at once");
    println!(
        "hub fetch of {} MiB over loopback (hashing included): {}",
        size >> 20,
        figures.join(", ")
    );
}

#[test]
fn a_part_cut_within_a_run_resumes_from_its_byte_and_nothing_is_fetched_twice() {
    let (hub, file, root) = hub_with_file("hub-part-cut", SMALL_LARGE_FILE);
    hub.rendezvous(2);
    let cut = SMALL_LARGE_FILE / 2 + 12345;
    hub.cut_once("big.gguf", cut);
    let cache = root.join("cache");
    let s = pull(&hub, &cache, 4).unwrap();
    assert!(same_bytes(&s.path, &file));
    assert_eq!(hub.sent_bytes(), SMALL_LARGE_FILE, "nothing fetched twice");
    assert_eq!(s.downloaded_bytes, SMALL_LARGE_FILE);
    let ranged: Vec<_> = hub
        .seen()
        .into_iter()
        .filter(|s| s.cdn && s.range_from.is_some())
        .collect();
    assert!(
        ranged.iter().any(|s| s.range_from == Some(cut)),
        "the cut part resumed at byte {cut}: {ranged:?}"
    );
    assert!(hub.max_in_flight() >= 2, "parts went at once");
}

#[test]
fn a_server_that_ignores_ranges_is_read_as_one_stream() {
    let (hub, file, root) = hub_with_file("hub-no-ranges", SMALL_LARGE_FILE);
    hub.set_ranges(Ranges::Ignored);
    let cache = root.join("cache");
    let s = pull(&hub, &cache, 4).unwrap();
    assert!(same_bytes(&s.path, &file));
    let whole: Vec<_> = hub
        .seen()
        .into_iter()
        .filter(|s| s.cdn && s.range_from.is_none() && s.body_bytes == SMALL_LARGE_FILE)
        .collect();
    assert!(!whole.is_empty(), "{:?}", hub.seen());
    assert_eq!(blobs(&cache).len(), 1, "{:?}", blobs(&cache));
}

#[test]
fn the_shards_of_a_checkpoint_download_at_once() {
    let root = scratch!("hub-shards");
    let repo = root.join("test-org/sharded");
    let shards = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    for (seed, shard) in shards.iter().enumerate() {
        write_seeded(&repo.join(shard), SMALL_LARGE_FILE, seed as u64);
    }
    std::fs::write(repo.join("config.json"), "{}").unwrap();
    std::fs::write(repo.join("tokenizer.json"), "{}").unwrap();
    std::fs::write(
        repo.join("model.safetensors.index.json"),
        format!(
            r#"{{"weight_map": {{"a": "{}", "b": "{}"}}}}"#,
            shards[0], shards[1]
        ),
    )
    .unwrap();
    let hub = TestHub::start(root.path());
    hub.rendezvous(2);
    let cache = root.join("cache");
    let source = HubSource::parse("hf://test-org/sharded").unwrap().unwrap();
    // One connection a file: what runs at once is files, not parts.
    let s = fetch(&source, &config(&hub, &cache, 1)).unwrap();
    for shard in shards {
        assert!(
            same_bytes(&s.path.join(shard), &repo.join(shard)),
            "{shard}"
        );
    }
    assert!(hub.max_in_flight() >= 2, "the shards went at once");
}

/// Pulls from a Hub that answers ranges as `ranges`, which must fail; checks that nothing
/// verified or linked is left and returns the error's text.
fn failed_pull(label: &str, ranges: Ranges) -> String {
    let (hub, _file, root) = hub_with_file(label, SMALL_LARGE_FILE);
    hub.set_ranges(ranges);
    let cache = root.join("cache");
    let err = pull(&hub, &cache, 4).unwrap_err();
    assert!(matches!(err, Error::Hub { .. }), "{err}");
    let left = blobs(&cache);
    assert!(
        left.iter().all(|b| b.contains('.')),
        "no verified blob: {left:?}"
    );
    let snapshots = cache.join("models--test-org--big/snapshots");
    assert!(
        std::fs::read_dir(&snapshots).map_or(true, |mut d| d.next().is_none()),
        "nothing linked into a snapshot"
    );
    err.to_string()
}

#[test]
fn a_server_whose_lengths_do_not_add_up_is_an_error_and_leaves_no_file() {
    let text = failed_pull("hub-short-length", Ranges::ShortLength);
    assert!(
        text.contains("big.gguf")
            && text.contains("Content-Length")
            && text.contains("does not match its Content-Range"),
        "{text}"
    );
}

#[test]
fn a_server_that_never_sends_a_ranges_body_is_an_error_after_five_attempts() {
    let text = failed_pull("hub-empty-body", Ranges::EmptyBody);
    assert!(
        text.contains("downloading big.gguf: bytes ") && text.contains("(5 attempts)"),
        "{text}"
    );
}
